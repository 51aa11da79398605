package admission

// What one source may make the check read. Without a budget, each review
// that names a pod costs a pod read from the API server, through the
// check's own client, whose rate (--eviction-check-qps) every caller
// shares: a pod that sends made-up reviews as fast as its connections
// carry them would spend that rate, and the API server's own calls would
// wait behind it. So a source (one node's pods, by their node's pod range,
// as the listeners' shares go; any other address by itself) has a budget
// of refusals: a review it sends that ends refused (no such pod, another
// UID, another node's pod) takes one from it, and while it has none, its
// reviews that would need a read are refused unread (429). A review the
// check allows takes nothing: the API server's calls (an agent evicting a
// pod on its own Node) are allowed, so however many it makes, and from
// wherever they come (a proxy pod on a node, as Konnectivity runs), they
// never spend a budget. And a pod's binding to its node never changes for
// its UID: once read, a pod's node is remembered by its UID (PodNodes), so
// a review asked again of the same pod costs no read.

import (
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// CallerOverBudget is the reason, as the metric counts it, of a review
// refused unread: its source has spent its budget of refusals (429).
const CallerOverBudget = "over-budget"

// Sources holds each source's budget of refusals.
type Sources struct {
	// ShareOf names the node whose pod range holds a client address ("":
	// none, and the address is a source of its own); nil: every address
	// is one.
	ShareOf func(netip.Addr) string
	// Rate and Burst size each source's budget.
	Rate  rate.Limit
	Burst int
	Clock clock.PassiveClock
	// Logger is told, at most once a minute, of a source over its budget.
	Logger *slog.Logger

	mu      sync.Mutex
	budgets map[string]*rate.Limiter
	logged  rate.Sometimes
}

// NewSources is Sources with the product's budget: 5 refusals a second
// from one source, in bursts of 20.
func NewSources(shareOf func(netip.Addr) string, logger *slog.Logger) *Sources {
	return &Sources{ShareOf: shareOf, Rate: 5, Burst: 20, Clock: clock.RealClock{}, Logger: logger}
}

// Of is the source of a request from remoteAddr (host:port): the node
// whose pod range holds its address, or the address.
func (s *Sources) Of(remoteAddr string) string {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	addr := ap.Addr().Unmap()
	if s.ShareOf != nil {
		if node := s.ShareOf(addr); node != "" {
			return "node " + node
		}
	}
	return addr.String()
}

// Spent reports whether source has no refusal left in its budget, and
// logs it at most once a minute.
func (s *Sources) Spent(source string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.budgets[source]
	if !ok || l.TokensAt(s.Clock.Now()) >= 1 {
		return false
	}
	s.logged.Interval, s.logged.First = time.Minute, 1
	s.logged.Do(func() {
		s.Logger.Warn("eviction check: a source spent its budget of refused reviews; its reviews are refused unread (counted as over-budget in the metric; logged at most once a minute)",
			"source", source)
	})
	return true
}

// Refused takes one refusal from source's budget (into debt, when it has
// none: reviews under way when it was spent count too).
func (s *Sources) Refused(source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.budgets[source]
	if !ok {
		if s.budgets == nil || len(s.budgets) >= maxKnown {
			s.budgets = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(s.Rate, s.Burst)
		s.budgets[source] = l
	}
	l.ReserveN(s.Clock.Now(), 1)
}

// podKey names a pod by its namespace, name and UID.
type podKey struct {
	namespace, name string
	uid             types.UID
}

// maxPodNodes bounds the pods whose node PodNodes remembers: past it, it
// forgets them all.
const maxPodNodes = 1 << 16

// PodNodes remembers the node of each pod read, by its UID: a pod's node
// never changes once it is bound.
type PodNodes struct {
	mu    sync.Mutex
	nodes map[podKey]string
}

// Get is the node of the pod of namespace, name and uid, if it was read.
func (p *PodNodes) Get(namespace, name string, uid types.UID) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	node, ok := p.nodes[podKey{namespace, name, uid}]
	return node, ok
}

// Put remembers node as the node of the pod of namespace, name and uid.
func (p *PodNodes) Put(namespace, name string, uid types.UID, node string) {
	if uid == "" || node == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nodes == nil || len(p.nodes) >= maxPodNodes {
		p.nodes = map[podKey]string{}
	}
	p.nodes[podKey{namespace, name, uid}] = node
}
