package admission_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"golang.org/x/time/rate"

	"github.com/maintenance-handler/maintenance-handler/admission"
)

// TestCallersAdmitTheAPIServerOnly: a request reaches the check only with
// a bearer token the API server reviews as an admitted user; every other
// is answered before any pod is read, and counted by reason. A token's
// answer is remembered for its period, so the API server's own token is
// reviewed once per period, and unknown tokens are reviewed at the
// limiter's pace, beyond which they are turned away unreviewed.
func TestCallersAdmitTheAPIServerOnly(t *testing.T) {
	users := map[string]string{"apiserver-token": "kube-apiserver", "pod-token": "system:serviceaccount:ml:trainer"}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	var reviews int
	var down bool
	refused := map[string]int{}
	reached := 0
	c := &admission.Callers{
		Review: func(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
			reviews++
			if down {
				return nil, errors.New("the API server is away")
			}
			user, ok := users[tr.Spec.Token]
			tr.Status = authnv1.TokenReviewStatus{Authenticated: ok, User: authnv1.UserInfo{Username: user}}
			return tr, nil
		},
		Users:    []string{"kube-apiserver"},
		Refused:  func(reason string) { refused[reason]++ },
		Remember: time.Minute,
		Unknown:  rate.NewLimiter(0, 3),
		Clock:    clk,
	}
	h := c.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached++ }))
	ask := func(auth string) int {
		r := httptest.NewRequest(http.MethodPost, admission.Path, nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, step := range []struct {
		name, auth       string
		code             int
		reached, reviews int
	}{
		{"no token", "", http.StatusUnauthorized, 0, 0},
		{"not a bearer token", "Basic YTpi", http.StatusUnauthorized, 0, 0},
		{"the API server's token", "Bearer apiserver-token", http.StatusOK, 1, 1},
		{"the API server's token again: remembered", "Bearer apiserver-token", http.StatusOK, 2, 1},
		{"a pod's token: another user", "Bearer pod-token", http.StatusForbidden, 2, 2},
		{"a pod's token again: remembered", "Bearer pod-token", http.StatusForbidden, 2, 2},
		{"a made-up token", "Bearer made-up", http.StatusUnauthorized, 2, 3},
		{"another made-up token: past the limiter's pace, unreviewed", "Bearer made-up-2", http.StatusTooManyRequests, 2, 3},
		{"the API server's token, still remembered", "Bearer apiserver-token", http.StatusOK, 3, 3},
	} {
		if code := ask(step.auth); code != step.code || reached != step.reached || reviews != step.reviews {
			t.Errorf("%s: %d, the check reached %d times, %d reviews; want %d, %d, %d", step.name, code, reached, reviews, step.code, step.reached, step.reviews)
		}
	}
	if want := map[string]int{admission.CallerNoToken: 2, admission.CallerNotAllowed: 2, admission.CallerNotValid: 1, admission.CallerThrottled: 1}; !maps.Equal(refused, want) {
		t.Errorf("refused %v, want %v", refused, want)
	}

	// Past its period the API server's token is reviewed again; a review
	// that fails turns the caller away (503: the API server retries).
	clk.Step(time.Minute)
	c.Unknown = rate.NewLimiter(rate.Inf, 0)
	down = true
	if code := ask("Bearer apiserver-token"); code != http.StatusServiceUnavailable || refused[admission.CallerNoReview] != 1 {
		t.Errorf("a review that fails: %d, refused %v; want 503 counted no-review", code, refused)
	}
	down = false
	if code := ask("Bearer apiserver-token"); code != http.StatusOK || reviews != 5 {
		t.Errorf("the API server's token past its period: %d after %d reviews, want 200 after 5", code, reviews)
	}
}

// TestCallersKeepTheAPIServerApartFromAFlood: a flood of made-up bearer
// tokens neither makes the check forget the API server's token, nor spends
// the budget the API server's token is reviewed within, whether the token
// is remembered, past its period, or new (a token the API server was given
// while the flood goes on).
func TestCallersKeepTheAPIServerApartFromAFlood(t *testing.T) {
	const apiserver, flooder = "10.0.0.1:40000", "10.0.0.9"
	for _, tc := range []struct {
		name string
		// unknown is the burst of the budget of everyone's unknown tokens
		// (never refilled); perSource the burst of one address's (0: none).
		unknown, perSource int
		// oneNode: the flood comes from as many addresses of one node's
		// pod range, which SourceOf names one source.
		oneNode bool
		// admitBefore: the API server's token is admitted before the flood;
		// stepAfter: the clock steps its period after it.
		admitBefore, stepAfter bool
		flood                  int
		// throttled: the flood goes past a budget (else it is all reviewed).
		throttled bool
		reviews   int // the reviews of the API server's token after the flood
	}{
		{name: "a flood past the memory's size does not make it forget the API server's token", unknown: 1101, admitBefore: true, flood: 1100, reviews: 0},
		{name: "past its period the API server's token is reviewed again outside the budgets", unknown: 3, admitBefore: true, stepAfter: true, flood: 10, throttled: true, reviews: 1},
		{name: "a flood from one address spends its own budget, not the API server's new token's", unknown: 10, perSource: 3, flood: 50, throttled: true, reviews: 1},
		{name: "a flood from many addresses of one node's pods spends one budget", unknown: 100, perSource: 3, oneNode: true, flood: 50, throttled: true, reviews: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
			reviewed := map[string]int{}
			refused := map[string]int{}
			c := &admission.Callers{
				Review: func(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
					reviewed[tr.Spec.Token]++
					ok := tr.Spec.Token == "apiserver-token"
					tr.Status = authnv1.TokenReviewStatus{Authenticated: ok, User: authnv1.UserInfo{Username: "kube-apiserver"}}
					return tr, nil
				},
				Users:    []string{"kube-apiserver"},
				Refused:  func(reason string) { refused[reason]++ },
				Remember: time.Minute,
				Unknown:  rate.NewLimiter(0, tc.unknown),
				Clock:    clk,
			}
			if tc.perSource > 0 {
				c.PerSource = func() *rate.Limiter { return rate.NewLimiter(0, tc.perSource) }
			}
			if tc.oneNode {
				c.SourceOf = func(addr string) string {
					if strings.HasPrefix(addr, "10.0.1.") {
						return "node node-1"
					}
					return addr
				}
			}
			h := c.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			ask := func(from, token string) int {
				r := httptest.NewRequest(http.MethodPost, admission.Path, nil)
				r.RemoteAddr = from
				r.Header.Set("Authorization", "Bearer "+token)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			if tc.admitBefore {
				if code := ask(apiserver, "apiserver-token"); code != http.StatusOK {
					t.Fatalf("the API server's token before the flood: %d, want 200", code)
				}
			}
			before := reviewed["apiserver-token"]
			for i := range tc.flood {
				from := fmt.Sprintf("%s:%d", flooder, 1000+i)
				if tc.oneNode {
					from = fmt.Sprintf("10.0.1.%d:1000", 2+i)
				}
				ask(from, fmt.Sprintf("made-up-%d", i))
			}
			if throttled := refused[admission.CallerThrottled] > 0; throttled != tc.throttled {
				t.Fatalf("the flood throttled %t (refused %v), want %t", throttled, refused, tc.throttled)
			}
			if tc.stepAfter {
				clk.Step(time.Minute)
			}
			if code := ask(apiserver, "apiserver-token"); code != http.StatusOK {
				t.Errorf("the API server's token after the flood: %d (refused %v), want 200", code, refused)
			}
			if got := reviewed["apiserver-token"] - before; got != tc.reviews {
				t.Errorf("the API server's token was reviewed %d times after the flood, want %d", got, tc.reviews)
			}
		})
	}
}
