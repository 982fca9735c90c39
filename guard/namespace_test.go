package guard_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opkit-dev/opkit/guard"
)

func TestNamespaceDeleting(t *testing.T) {
	live, going := newNamespace(t), newNamespace(t)
	must(t, env.Client.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: going}}))
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	must(t, err)
	forbidden := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, live, errors.New("bound to some namespaces only"))
		},
	})
	for _, tc := range []struct {
		name   string
		reader client.Reader
		ns     string
		want   bool
	}{
		{"live", env.Client, live, false},
		{"being deleted", env.Client, going, true},
		{"gone", env.Client, "no-such-namespace", true},
		{"not readable", forbidden, live, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guard.NamespaceDeleting(t.Context(), tc.reader, tc.ns)
			if err != nil || got != tc.want {
				t.Errorf("NamespaceDeleting(%s) = %v, %v; want %v", tc.ns, got, err, tc.want)
			}
		})
	}
}
