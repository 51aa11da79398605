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
	"errors"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// Reasons a caller is turned away, as the metric counts them.
const (
	CallerNoToken    = "no-token"    // no bearer token: 401
	CallerNotValid   = "not-valid"   // the API server does not know the token: 401
	CallerNotAllowed = "not-allowed" // a valid token of another user: 403
	CallerThrottled  = "throttled"   // too many unknown tokens to review: 429
	CallerNoReview   = "no-review"   // the token could not be reviewed: 503
)

// TokenReviewer reviews one token (client-go's TokenReviews().Create).
type TokenReviewer func(ctx context.Context, review *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)

// Callers admits to the check only requests whose bearer token the API
// server reviews as one of Users.
//
// The API server's identity is kept apart from unknown tokens, so that a
// flood of made-up tokens neither delays nor refuses its calls:
//   - a token admitted is remembered for Remember apart from every other
//     (no number of other tokens makes the check forget it), and once
//     that period ends it is reviewed again outside any budget;
//   - a token not admitted before is reviewed within two budgets: its
//     source's (PerSource: its client address, or all its node's pods,
//     SourceOf) and everyone's (Unknown); beyond either it gets 429 at
//     once, unreviewed. A flood from one source spends its own budget,
//     not the API server's, and all of them
//     together no more of the API server than Unknown;
//   - requests that bring the same token at once share one review.
//
// Other tokens' answers are remembered for Remember too, so a refused
// caller that asks again costs no review.
type Callers struct {
	Review TokenReviewer
	// Users are the user names admitted (the API server's, as its webhook
	// kubeconfig authenticates it).
	Users []string
	// Refused counts the callers turned away, by reason.
	Refused  func(reason string)
	Remember time.Duration
	// Unknown bounds the reviews of tokens not admitted before, in all.
	Unknown *rate.Limiter
	// PerSource, when set, makes the bound of one source's reviews of
	// tokens not admitted before.
	PerSource func() *rate.Limiter
	// SourceOf, when set, names the source of a request from a client
	// address (host:port), such as one node's pods (Sources.Of); nil: each
	// address is one.
	SourceOf func(remoteAddr string) string
	Clock    clock.PassiveClock

	mu sync.Mutex
	// admitted holds the tokens reviewed as one of Users.
	admitted map[[sha256.Size]byte]knownToken
	// known holds the other tokens' answers.
	known   map[[sha256.Size]byte]knownToken
	sources map[string]*rate.Limiter
	flights singleflight.Group
}

// NewCallers is Callers of users with the product's defaults: a token's
// answer remembered a minute; tokens not admitted before reviewed at 20 a
// second in all (bursts of 20), 1 a second from one client address
// (bursts of 5).
func NewCallers(review TokenReviewer, users []string, refused func(reason string)) *Callers {
	return &Callers{Review: review, Users: users, Refused: refused, Remember: time.Minute,
		Unknown: rate.NewLimiter(20, 20), PerSource: func() *rate.Limiter { return rate.NewLimiter(1, 5) }, Clock: clock.RealClock{}}
}

type knownToken struct {
	user    string // "" where the API server did not authenticate it
	expires time.Time
}

// maxKnown bounds the other tokens remembered, and the client addresses
// whose budgets are kept: past it, they are cleared.
const maxKnown = 1024

// maxAdmitted bounds the admitted tokens remembered: only the API
// server's tokens are, so a few; past it, the expired ones are dropped.
const maxAdmitted = 64

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
	key := sha256.Sum256([]byte(token))
	user, known, again := c.remembered(key)
	if !known {
		v, err, _ := c.flights.Do(string(key[:]), func() (any, error) {
			if !again && !c.budget(r.RemoteAddr) {
				return nil, errThrottled
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), reviewTimeout)
			defer cancel()
			tr, err := c.Review(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			user := ""
			if tr.Status.Authenticated {
				user = tr.Status.User.Username
			}
			c.remember(key, user)
			return user, nil
		})
		switch {
		case errors.Is(err, errThrottled):
			return http.StatusTooManyRequests, CallerThrottled
		case err != nil:
			return http.StatusServiceUnavailable, CallerNoReview
		}
		user = v.(string)
	}
	switch {
	case user == "":
		return http.StatusUnauthorized, CallerNotValid
	case !slices.Contains(c.Users, user):
		return http.StatusForbidden, CallerNotAllowed
	}
	return 0, ""
}

// errThrottled is the flight's answer to a token past its budgets.
var errThrottled = errors.New("past the budget of unknown tokens")

// remembered is the user key's token was reviewed as, and whether that
// answer still holds; again says its token was admitted once, and is
// reviewed again outside the budgets.
func (c *Callers) remembered(key [sha256.Size]byte) (user string, known, again bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Clock.Now()
	if k, ok := c.admitted[key]; ok {
		if now.Before(k.expires) {
			return k.user, true, false
		}
		return "", false, true
	}
	k, ok := c.known[key]
	if !ok || !now.Before(k.expires) {
		return "", false, false
	}
	return k.user, true, false
}

// budget takes one review from the budget of the source of the client at
// addr and from everyone's, and says whether both had one.
func (c *Callers) budget(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Clock.Now()
	if c.PerSource != nil {
		src := ""
		if c.SourceOf != nil {
			src = c.SourceOf(addr)
		} else if ap, err := netip.ParseAddrPort(addr); err == nil {
			src = ap.Addr().Unmap().String()
		}
		if c.sources == nil || len(c.sources) >= maxKnown {
			c.sources = map[string]*rate.Limiter{}
		}
		l, ok := c.sources[src]
		if !ok {
			l = c.PerSource()
			c.sources[src] = l
		}
		if !l.AllowN(now, 1) {
			return false
		}
	}
	return c.Unknown.AllowN(now, 1)
}

func (c *Callers) remember(key [sha256.Size]byte, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.Clock.Now()
	if user != "" && slices.Contains(c.Users, user) {
		if len(c.admitted) >= maxAdmitted {
			maps.DeleteFunc(c.admitted, func(_ [sha256.Size]byte, k knownToken) bool { return !now.Before(k.expires) })
		}
		if c.admitted == nil || len(c.admitted) >= maxAdmitted {
			c.admitted = map[[sha256.Size]byte]knownToken{}
		}
		c.admitted[key] = knownToken{user: user, expires: now.Add(c.Remember)}
		return
	}
	delete(c.admitted, key)
	if c.known == nil || len(c.known) >= maxKnown {
		c.known = map[[sha256.Size]byte]knownToken{}
	}
	c.known[key] = knownToken{user: user, expires: now.Add(c.Remember)}
}
