package securemetrics

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/opkit-dev/opkit/internal/testkit"
)

// reader is the user of the token "reader-token", the only one the fake API
// server lets get /metrics.
var reader = authenticationv1.UserInfo{
	Username: "system:serviceaccount:monitoring:prometheus",
	UID:      "4b1e",
	Groups:   []string{"system:serviceaccounts", "system:authenticated"},
	Extra:    map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
}

// fakeReviews is an API server that answers TokenReviews and
// SubjectAccessReviews and counts them.
type fakeReviews struct {
	mu             sync.Mutex
	tokens, access int
	specs          []authorizationv1.SubjectAccessReviewSpec
	flaky          int // TokenReviews of "flaky-token" still to fail with 429
}

func (f *fakeReviews) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	write := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(err *apierrors.StatusError) { write(int(err.ErrStatus.Code), err.ErrStatus) }
	var (
		review runtime.Object
		answer func() *apierrors.StatusError
	)
	switch req.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		f.tokens++
		tr := &authenticationv1.TokenReview{}
		review, answer = tr, func() *apierrors.StatusError { return f.reviewToken(tr) }
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		f.access++
		sar := &authorizationv1.SubjectAccessReview{}
		review, answer = sar, func() *apierrors.StatusError { return f.reviewAccess(sar) }
	default:
		fail(apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path))
		return
	}
	if err := decode(req, review); err != nil {
		fail(apierrors.NewBadRequest(err.Error()))
		return
	}
	if err := answer(); err != nil {
		fail(err)
		return
	}
	write(http.StatusCreated, review)
}

// reviewToken answers tr, or fails as the API server would.
func (f *fakeReviews) reviewToken(tr *authenticationv1.TokenReview) *apierrors.StatusError {
	switch tr.Spec.Token {
	case "reader-token":
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: reader}
	case "other-token":
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice"}}
	case "broken-sar-token":
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "broken"}}
	case "flaky-token":
		if f.flaky > 0 {
			f.flaky--
			return apierrors.NewTooManyRequests("slow down", 0)
		}
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: reader}
	case "broken-token":
		return apierrors.NewInternalError(http.ErrHandlerTimeout)
	case "forbidden-token": // the operator may not create TokenReviews
		return apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", nil)
	default:
		tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
	return nil
}

// reviewAccess answers sar, recording its spec: only reader may get
// /metrics, and the user "broken" makes the review fail.
func (f *fakeReviews) reviewAccess(sar *authorizationv1.SubjectAccessReview) *apierrors.StatusError {
	f.specs = append(f.specs, sar.Spec)
	if sar.Spec.User == "broken" {
		return apierrors.NewInternalError(http.ErrHandlerTimeout)
	}
	na := sar.Spec.NonResourceAttributes
	sar.Status.Allowed = sar.Spec.User == reader.Username && na != nil && na.Path == "/metrics" && na.Verb == "get"
	sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
	return nil
}

// decode reads a request body the way the API server does: protobuf, as
// client-go's typed clients send built-in kinds, or JSON.
func decode(req *http.Request, into runtime.Object) error {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	_, _, err = scheme.Codecs.UniversalDeserializer().Decode(body, nil, into)
	return err
}

func (f *fakeReviews) counts() (tokens, access int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens, f.access
}

// fakeClock is a cache.Clock the test moves.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// newTestFilter returns the filter in front of a handler that answers 200
// "metrics", recording whether it saw an Authorization header, and the fake
// API server it asks.
func newTestFilter(t *testing.T, clock cache.Clock) (http.Handler, *fakeReviews, *bool) {
	t.Helper()
	api := &fakeReviews{flaky: 2}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	authn, err := authenticationv1client.NewForConfigAndClient(cfg, srv.Client())
	testkit.Must(t, err)
	authz, err := authorizationv1client.NewForConfigAndClient(cfg, srv.Client())
	testkit.Must(t, err)
	r := newReviewer(authn.TokenReviews(), authz.SubjectAccessReviews())
	r.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
	r.users = cache.NewLRUExpireCacheWithClock(cacheEntries, clock)
	r.allowed = cache.NewLRUExpireCacheWithClock(cacheEntries, clock)
	sawToken := new(bool)
	next := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		*sawToken = req.Header.Get("Authorization") != ""
		_, _ = w.Write([]byte("metrics"))
	})
	return r.filter(logr.Discard(), next), api, sawToken
}

func serve(h http.Handler, method, path, authorization string) int {
	req := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func TestFilterAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, authorization string
		want                              int
		wantTokenReviews, wantAccess      int
	}{
		{name: "no header", want: http.StatusUnauthorized},
		{name: "basic credentials", authorization: "Basic cmVhZGVyOnB3", want: http.StatusUnauthorized},
		{name: "empty bearer token", authorization: "Bearer  ", want: http.StatusUnauthorized},
		{name: "token the API server rejects", authorization: "Bearer not-a-token", want: http.StatusUnauthorized, wantTokenReviews: 1},
		{name: "reader gets /metrics", authorization: "Bearer reader-token", want: http.StatusOK, wantTokenReviews: 1, wantAccess: 1},
		{name: "scheme is case-insensitive", authorization: "bearer reader-token", want: http.StatusOK, wantTokenReviews: 1, wantAccess: 1},
		{name: "reader posts /metrics", method: http.MethodPost, authorization: "Bearer reader-token", want: http.StatusForbidden, wantTokenReviews: 1, wantAccess: 1},
		{name: "reader gets another path", path: "/debug/pprof/", authorization: "Bearer reader-token", want: http.StatusForbidden, wantTokenReviews: 1, wantAccess: 1},
		{name: "user without the permission", authorization: "Bearer other-token", want: http.StatusForbidden, wantTokenReviews: 1, wantAccess: 1},
		{name: "TokenReview throttled twice, then answered", authorization: "Bearer flaky-token", want: http.StatusOK, wantTokenReviews: 3, wantAccess: 1},
		{name: "TokenReview failing", authorization: "Bearer broken-token", want: http.StatusInternalServerError, wantTokenReviews: 3},
		{name: "TokenReview forbidden, not retried", authorization: "Bearer forbidden-token", want: http.StatusInternalServerError, wantTokenReviews: 1},
		{name: "SubjectAccessReview failing", authorization: "Bearer broken-sar-token", want: http.StatusInternalServerError, wantTokenReviews: 1, wantAccess: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, api, sawToken := newTestFilter(t, &fakeClock{now: time.Now()})
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodGet
			}
			if path == "" {
				path = "/metrics"
			}
			if got := serve(h, method, path, tc.authorization); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
			if tokens, access := api.counts(); tokens != tc.wantTokenReviews || access != tc.wantAccess {
				t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want %d and %d", tokens, access, tc.wantTokenReviews, tc.wantAccess)
			}
			if *sawToken {
				t.Error("the handler behind the filter saw the Authorization header")
			}
		})
	}
}

// TestFilterAsksAboutTheTokensUser: the SubjectAccessReview names the user
// with everything the TokenReview said of it, and the URL.
func TestFilterAsksAboutTheTokensUser(t *testing.T) {
	h, api, _ := newTestFilter(t, &fakeClock{now: time.Now()})
	if got := serve(h, http.MethodGet, "/metrics", "Bearer reader-token"); got != http.StatusOK {
		t.Fatalf("status %d, want 200", got)
	}
	want := []authorizationv1.SubjectAccessReviewSpec{{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		User:                  reader.Username,
		Groups:                reader.Groups,
		UID:                   reader.UID,
		Extra:                 map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
	}}
	if diff := cmp.Diff(want, api.specs); diff != "" {
		t.Errorf("SubjectAccessReview specs (-want +got):\n%s", diff)
	}
}

// TestFilterCaches: a scraper coming back costs no reviews until the answer
// expires; denials and rejected tokens expire sooner than grants.
func TestFilterCaches(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	h, api, _ := newTestFilter(t, clock)
	type step struct {
		after         time.Duration // clock moved before the request
		authorization string
		want          int
		tokens        int // TokenReviews in all, after the request
		access        int // SubjectAccessReviews in all
	}
	for i, s := range []step{
		{0, "Bearer reader-token", http.StatusOK, 1, 1},
		{15 * time.Second, "Bearer reader-token", http.StatusOK, 1, 1},
		{0, "Bearer other-token", http.StatusForbidden, 2, 2},
		{0, "Bearer other-token", http.StatusForbidden, 2, 2},
		{0, "Bearer not-a-token", http.StatusUnauthorized, 3, 2},
		{0, "Bearer not-a-token", http.StatusUnauthorized, 3, 2},
		// 26 s in: the rejected token is asked about again; the denial holds.
		{11 * time.Second, "Bearer not-a-token", http.StatusUnauthorized, 4, 2},
		{0, "Bearer other-token", http.StatusForbidden, 4, 2},
		// 46 s: the denial has expired, the token not yet.
		{20 * time.Second, "Bearer other-token", http.StatusForbidden, 4, 3},
		// 76 s: both tokens are asked about again; the grant holds.
		{30 * time.Second, "Bearer reader-token", http.StatusOK, 5, 3},
		// 5 min 16 s: the grant has expired too.
		{4 * time.Minute, "Bearer reader-token", http.StatusOK, 6, 4},
	} {
		clock.now = clock.now.Add(s.after)
		if got := serve(h, http.MethodGet, "/metrics", s.authorization); got != s.want {
			t.Errorf("request %d (%s): status %d, want %d", i, s.authorization, got, s.want)
		}
		if tokens, access := api.counts(); tokens != s.tokens || access != s.access {
			t.Errorf("after request %d (%s): %d TokenReviews and %d SubjectAccessReviews in all, want %d and %d", i, s.authorization, tokens, access, s.tokens, s.access)
		}
	}
}
