package incluster

import "testing"

func TestCutShortAcquire(t *testing.T) {
	const (
		attempting = `[pod/op-a/manager] {"level":"info","logger":"leaderelection","msg":"Attempting to acquire leader lease...","lock":"ns/lease"}`
		cancelled  = `[pod/op-a/manager] {"level":"error","logger":"leaderelection","msg":"Failed to update lock","lock":"ns/lease","error":"Put \"https://10.0.0.1:443/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease\": context canceled"}`
		otherError = `[pod/op-a/manager] {"level":"error","logger":"leaderelection","msg":"Failed to update lock","lock":"ns/lease","error":"Operation cannot be fulfilled: the object has been modified"}`
		acquired   = `[pod/op-a/manager] {"level":"info","logger":"leaderelection","msg":"Successfully acquired lease","lock":"ns/lease"}`
	)
	for _, tc := range []struct {
		name string
		log  []string
		want bool
	}{
		{name: "an update cancelled by the shutdown, the lease never known to be held", log: []string{attempting, cancelled}, want: true},
		{name: "a lease taken: the pod had it to release", log: []string{attempting, acquired, cancelled}},
		{name: "an update refused, not cancelled", log: []string{attempting, otherError}},
		{name: "no log", log: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cutShortAcquire(tc.log); got != tc.want {
				t.Errorf("cutShortAcquire = %v, want %v", got, tc.want)
			}
		})
	}
}
