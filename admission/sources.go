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
	"maps"
	"net/netip"
	"strings"
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
//
// An address in no node's pod range may carry the API server's calls,
// which bring every agent's evictions: there the refusals are counted per
// node the reviews' tokens name (so that one node's agent whose evictions
// of other nodes' pods the check refuses spends its own budget, not the
// other agents'), and per address, within a wider budget (so that a client
// that makes up the node it names spends no more than that).
type Sources struct {
	// ShareOf names the node whose pod range holds a client address ("":
	// none, and the address is a source of its own); nil: every address
	// is one.
	ShareOf func(netip.Addr) string
	// Rate and Burst size the budget of one node's pods, and of the
	// reviews of one node's token from an address in no node's range.
	Rate  rate.Limit
	Burst int
	// AddressRate and AddressBurst size the budget of an address in no
	// node's range, whatever nodes its reviews name.
	AddressRate  rate.Limit
	AddressBurst int
	Clock        clock.PassiveClock
	// Logger is told, at most once a minute, of a source over its budget.
	Logger *slog.Logger

	mu      sync.Mutex
	budgets map[string]*rate.Limiter
	logged  rate.Sometimes
}

// NewSources is Sources with the product's budgets: 5 refusals a second
// from one node's pods, or for one node's token from another address, in
// bursts of 20; 50 a second from such an address in all, in bursts of 200.
func NewSources(shareOf func(netip.Addr) string, logger *slog.Logger) *Sources {
	return &Sources{ShareOf: shareOf, Rate: 5, Burst: 20, AddressRate: 50, AddressBurst: 200, Clock: clock.RealClock{}, Logger: logger}
}

// nodePrefix starts the name of a source that is one node's pods.
const nodePrefix = "node "

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
			return nodePrefix + node
		}
	}
	return addr.String()
}

// budget is one budget a review from a source takes a refusal from.
type budget struct {
	key   string
	rate  rate.Limit
	burst int
}

// budgetsOf are the budgets of source's reviews whose token names node.
func (s *Sources) budgetsOf(source, node string) []budget {
	if strings.HasPrefix(source, nodePrefix) {
		return []budget{{source, s.Rate, s.Burst}}
	}
	return []budget{{source, s.AddressRate, s.AddressBurst}, {source + " for node " + node, s.Rate, s.Burst}}
}

// Spent reports whether a budget of source's reviews whose token names
// node has no refusal left, and logs it at most once a minute.
func (s *Sources) Spent(source, node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Clock.Now()
	for _, b := range s.budgetsOf(source, node) {
		if l, ok := s.budgets[b.key]; ok && l.TokensAt(now) < 1 {
			s.logged.Interval, s.logged.First = time.Minute, 1
			s.logged.Do(func() {
				s.Logger.Warn("eviction check: a source spent its budget of refused reviews; its reviews are refused unread (counted as over-budget in the metric; logged at most once a minute)",
					"source", b.key)
			})
			return true
		}
	}
	return false
}

// Refused takes one refusal from each budget of source's reviews whose
// token names node (into debt, when one has none: reviews under way when
// it was spent count too).
func (s *Sources) Refused(source, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Clock.Now()
	for _, b := range s.budgetsOf(source, node) {
		l, ok := s.budgets[b.key]
		if !ok {
			s.makeRoom(now)
			l = rate.NewLimiter(b.rate, b.burst)
			s.budgets[b.key] = l
		}
		l.ReserveN(now, 1)
	}
}

// makeRoom makes room for one more budget: past maxKnown, it forgets the
// budgets that are full again (they say nothing a new one would not),
// and, should none be, all of them.
func (s *Sources) makeRoom(now time.Time) {
	if s.budgets == nil {
		s.budgets = map[string]*rate.Limiter{}
	}
	if len(s.budgets) < maxKnown {
		return
	}
	maps.DeleteFunc(s.budgets, func(_ string, l *rate.Limiter) bool { return l.TokensAt(now) >= float64(l.Burst()) })
	if len(s.budgets) >= maxKnown {
		s.budgets = map[string]*rate.Limiter{}
	}
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
