package admission

// Who may ask: the API server, where it presents a credential to
// webhooks. A kube-apiserver sends one when its admission configuration
// names a kubeconfig for webhooks (WebhookAdmissionConfiguration's
// kubeConfigFile; Kubernetes' "Dynamic Admission Control", "Authenticate
// apiservers"). GKE's control plane takes no such configuration and sends
// none: there the check answers any caller, and is fenced by the network
// (docs/security.md).

import (
	"context"
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"golang.org/x/time/rate"
)

// Reasons a caller is turned away, as the metric counts them.
const (
	CallerNoToken    = "no-token"    // no bearer token: 401
	CallerNotValid   = "not-valid"   // the API server does not know the token: 401
	CallerNotAllowed = "not-allowed" // a valid token of another user: 403
	CallerThrottled  = "throttled"   // too many unknown tokens to review at once: 429
	CallerNoReview   = "no-review"   // the token could not be reviewed: 503
)

// TokenReviewer reviews one token (client-go's TokenReviews().Create).
type TokenReviewer func(ctx context.Context, review *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)

// Callers admits to the check only requests whose bearer token the API
// server reviews as one of Users. A token's answer is remembered for
// Remember, so the API server's own token costs one review per period; an
// unknown token costs one review, at most Unknown a second (beyond that,
// 429 at once), so a flood of made-up tokens reads no pod and spends no
// more of the API server than that.
type Callers struct {
	Review TokenReviewer
	// Users are the user names admitted (the API server's, as its webhook
	// kubeconfig authenticates it).
	Users []string
	// Refused counts the callers turned away, by reason.
	Refused  func(reason string)
	Remember time.Duration
	Unknown  *rate.Limiter
	Clock    clock.PassiveClock

	mu    sync.Mutex
	known map[[sha256.Size]byte]knownToken
}

// NewCallers is Callers of users with the product's defaults: a token's
// answer remembered a minute, unknown tokens reviewed at 20 a second.
func NewCallers(review TokenReviewer, users []string, refused func(reason string)) *Callers {
	return &Callers{Review: review, Users: users, Refused: refused, Remember: time.Minute, Unknown: rate.NewLimiter(20, 20), Clock: clock.RealClock{}}
}

type knownToken struct {
	user    string // "" where the API server did not authenticate it
	expires time.Time
}

// maxKnown bounds the tokens remembered: past it, the memory is cleared
// (the API server's token is reviewed again, once).
const maxKnown = 1024

// reviewTimeout bounds a token's review within the API server's 5 s call.
const reviewTimeout = 2 * time.Second

// Wrap is next behind the callers' check.
func (c *Callers) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, reason := c.admit(r); code != 0 {
			c.Refused(reason)
			http.Error(w, "the eviction check answers the API server only: "+reason, code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// admit is 0 for a caller that may ask, else the HTTP status and the
// reason it may not.
func (c *Callers) admit(r *http.Request) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, CallerNoToken
	}
	user, ok := c.remembered(token)
	if !ok {
		if !c.Unknown.Allow() {
			return http.StatusTooManyRequests, CallerThrottled
		}
		ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
		defer cancel()
		tr, err := c.Review(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			return http.StatusServiceUnavailable, CallerNoReview
		}
		if tr.Status.Authenticated {
			user = tr.Status.User.Username
		}
		c.remember(token, user)
	}
	switch {
	case user == "":
		return http.StatusUnauthorized, CallerNotValid
	case !slices.Contains(c.Users, user):
		return http.StatusForbidden, CallerNotAllowed
	}
	return 0, ""
}

func (c *Callers) remembered(token string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.known[sha256.Sum256([]byte(token))]
	if !ok || !c.Clock.Now().Before(k.expires) {
		return "", false
	}
	return k.user, true
}

func (c *Callers) remember(token, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil || len(c.known) >= maxKnown {
		c.known = map[[sha256.Size]byte]knownToken{}
	}
	c.known[sha256.Sum256([]byte(token))] = knownToken{user: user, expires: c.Clock.Now().Add(c.Remember)}
}
