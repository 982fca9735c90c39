package securemetrics

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// How long a review's answer is reused. A scraper comes back every 15-60 s
// with the same token, so caching turns two API requests per scrape into
// two per TTL. Revoking a token or a binding takes effect within these.
const (
	tokenTTL       = time.Minute      // an authenticated token
	badTokenTTL    = 10 * time.Second // a token the API server did not authenticate
	allowedTTL     = 5 * time.Minute
	deniedTTL      = 30 * time.Second
	cacheEntries   = 1024
	maxTokenLength = 16 << 10
)

// reviewBackoff retries a review the API server failed for a moment
// (throttled, restarting, a dropped connection): about 4 s in all, within a
// Prometheus scrape timeout.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// reviewer asks the API server who a bearer token belongs to (TokenReview)
// and whether that user may use a URL (SubjectAccessReview), and caches both
// answers.
type reviewer struct {
	tokens  authenticationv1client.TokenReviewInterface
	access  authorizationv1client.SubjectAccessReviewInterface
	backoff wait.Backoff

	users   *cache.LRUExpireCache // sha256 of the token -> *authenticationv1.UserInfo, nil if not authenticated
	allowed *cache.LRUExpireCache // sha256 of the review's spec -> bool
}

func newReviewer(tokens authenticationv1client.TokenReviewInterface, access authorizationv1client.SubjectAccessReviewInterface) *reviewer {
	return &reviewer{
		tokens:  tokens,
		access:  access,
		backoff: reviewBackoff,
		users:   cache.NewLRUExpireCache(cacheEntries),
		allowed: cache.NewLRUExpireCache(cacheEntries),
	}
}

// authenticate returns the user a token belongs to, nil if the API server
// does not authenticate it, or an error if it could not be asked.
func (r *reviewer) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := r.users.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	var got *authenticationv1.TokenReview
	err := r.retry(ctx, func(ctx context.Context) (err error) {
		got, err = r.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating a TokenReview: %w", err)
	}
	if !got.Status.Authenticated {
		r.users.Add(key, (*authenticationv1.UserInfo)(nil), badTokenTTL)
		return nil, nil
	}
	user := got.Status.User
	r.users.Add(key, &user, tokenTTL)
	return &user, nil
}

// authorize reports whether user may use verb on the non-resource URL path.
func (r *reviewer) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		User:                  user.Username,
		Groups:                user.Groups,
		UID:                   user.UID,
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	raw, err := json.Marshal(spec) // map keys sorted: equal specs, equal keys
	if err != nil {
		return false, fmt.Errorf("encoding a SubjectAccessReview: %w", err)
	}
	key := sha256.Sum256(raw)
	if v, ok := r.allowed.Get(key); ok {
		return v.(bool), nil
	}
	var got *authorizationv1.SubjectAccessReview
	err = r.retry(ctx, func(ctx context.Context) (err error) {
		got, err = r.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	ok := got.Status.Allowed && !got.Status.Denied
	if ok {
		r.allowed.Add(key, true, allowedTTL)
	} else {
		r.allowed.Add(key, false, deniedTTL)
	}
	return ok, nil
}

// retry calls create until it succeeds, fails for good, or the backoff or
// ctx ends; it returns create's last error.
func (r *reviewer) retry(ctx context.Context, create func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, r.backoff, func(ctx context.Context) (bool, error) {
		last = create(ctx)
		switch {
		case last == nil:
			return true, nil
		case transient(last):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		return fmt.Errorf("%w (gave up: %w)", last, err)
	}
	return err
}

// transient reports whether a failed review may succeed if sent again.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err)
}
