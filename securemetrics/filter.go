package securemetrics

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// AuthFilter is a metricsserver.Options.FilterProvider that serves a
// request only if its bearer token is authenticated by the API server (a
// TokenReview) and its user is authorised to use the request's URL, the
// verb being the lower-cased HTTP method, as the API server has it for its
// own non-resource URLs (a SubjectAccessReview). ServerOptions sets it when
// secure is true.
//
// It answers
//   - 401 to a request without a bearer token, or with one the API server
//     does not authenticate (expired, revoked, malformed);
//   - 403 to an authenticated user without the permission;
//   - 500 when a review could not be made after retries (the operator's
//     ServiceAccount may not create reviews, or the API server is down).
//
// Answers are cached: an authenticated token for a minute, a rejected one for
// 10 s, an allowed user and URL for 5 minutes, a denied one for 30 s. So a
// revoked token or binding can read metrics for up to that long.
//
// It does what controller-runtime's filters.WithAuthenticationAndAuthorization
// does without linking k8s.io/apiserver, which brings CEL, gRPC and
// OpenTelemetry into the operator (see the package documentation). Unlike
// that filter it answers 401, not 500, to a token the API server reports an
// error for, such as a malformed one: the client's mistake, not the
// operator's.
func AuthFilter(c *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationv1client.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("securemetrics: a TokenReview client: %w", err)
	}
	authz, err := authorizationv1client.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("securemetrics: a SubjectAccessReview client: %w", err)
	}
	r := newReviewer(authn.TokenReviews(), authz.SubjectAccessReviews())
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return r.filter(log, next), nil
	}, nil
}

// filter wraps next with the reviews. A handler has no caller to return an
// error to, so the reviews that failed go to log (the metrics server's
// logger): they are the only answers an operator's owner must act on;
// denials are the client's business and are not logged.
func (r *reviewer) filter(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		token, ok := bearerToken(req)
		if !ok {
			unauthorized(w)
			return
		}
		user, err := r.authenticate(ctx, token)
		if err != nil {
			log.Error(err, "Cannot authenticate a metrics request", "remote", req.RemoteAddr)
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			unauthorized(w)
			return
		}
		// The token stays with this filter: the handler has no use for it.
		req.Header.Del("Authorization")
		verb := strings.ToLower(req.Method) // as the API server names verbs on non-resource URLs
		allowed, err := r.authorize(ctx, user, verb, req.URL.Path)
		if err != nil {
			log.Error(err, "Cannot authorise a metrics request", "user", user.Username, "remote", req.RemoteAddr)
			http.Error(w, "Authorization failed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", user.Username, verb, req.URL.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > maxTokenLength {
		return "", false
	}
	return token, true
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
	http.Error(w, "Unauthorized", http.StatusUnauthorized)
}
