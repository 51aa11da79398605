package lease

import (
	"context"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Election is a run for the leadership one Lease stands for, with the
// Lease's usual protocol (the one client-go's leaderelection follows with
// a LeaseLock and ReleaseOnCancel, so that replicas of two versions of the
// aggregator elect one leader between them):
//
//   - The holder writes its identity and renewTime every RetryPeriod, in
//     one request: an update of the Lease as it last wrote it, which
//     conflicts (and the Lease is read) if anyone wrote it since.
//   - Another replica takes the Lease over only when it has seen the Lease
//     unchanged for its leaseDurationSeconds (by its own clock: the
//     replicas' clocks need not agree), or when the Lease names no holder.
//   - A holder that has not renewed within RenewDeadline stops leading
//     before another may take over (RenewDeadline < LeaseDuration).
//   - A holder that stops because its context ended gives the Lease up
//     (no holder), so that another replica leads at once.
//
// Each write is conditional on the Lease's resourceVersion: of two
// replicas that both see the Lease free, one wins.
type Election struct {
	Client          *Client
	Namespace, Name string
	// Identity names this replica in the Lease (holderIdentity).
	Identity string
	// LeaseDuration is how long the others wait on an unchanged Lease;
	// RenewDeadline how long the leader tries to renew before it stops
	// leading; RetryPeriod how often it renews, and how often a follower
	// tries to acquire.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
	// FieldManager names this client's writes.
	FieldManager string

	last       *coordinationv1.Lease // as last read or written (nil: given up)
	observedAt time.Time             // when it last changed, by this clock
}

// Run is one term: it tries to acquire the Lease every RetryPeriod (with
// jitter) until it does or ctx ends; then runs lead with a context that
// ends when the Lease is lost (not renewed within RenewDeadline) or ctx
// ends, renewing the Lease meanwhile. It returns once lead has returned and
// the Lease, if still held, has been given up (a lead that returns by
// itself ends the term too).
func (e *Election) Run(ctx context.Context, lead func(context.Context)) {
	if !e.acquire(ctx) {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel() // a lead that returns ends the term
		lead(lctx)
	}()
	e.renew(lctx)
	cancel()
	<-done
	e.release(ctx)
}

// acquire tries until it holds the Lease (true) or ctx ends (false).
func (e *Election) acquire(ctx context.Context) bool {
	for {
		if e.tryAcquireOrRenew(ctx) {
			return true
		}
		if !sleep(ctx, wait.Jitter(e.RetryPeriod, 1.2)) {
			return false
		}
	}
}

// renew renews the Lease every RetryPeriod and returns when ctx ends or a
// renewal has not succeeded within RenewDeadline (the Lease lost).
func (e *Election) renew(ctx context.Context) {
	for {
		rctx, cancel := context.WithTimeout(ctx, e.RenewDeadline)
		renewed := false
		for !renewed {
			if renewed = e.tryAcquireOrRenew(rctx); !renewed && !sleep(rctx, e.RetryPeriod) {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !renewed {
			e.log().Warn("leader lease not renewed within the renew deadline: leadership lost", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
			return
		}
		if !sleep(ctx, e.RetryPeriod) {
			return
		}
	}
}

// tryAcquireOrRenew makes one attempt to hold the Lease.
func (e *Election) tryAcquireOrRenew(ctx context.Context) bool {
	now := time.Now()
	// The holder renews the Lease as it last wrote it, unread: the write is
	// conditional on its resourceVersion, so if anyone wrote it since, it
	// conflicts and the Lease is read.
	if e.last != nil && deref(e.last.Spec.HolderIdentity) == e.Identity {
		l := e.last.DeepCopy()
		l.Spec = e.spec(now, &l.Spec)
		if out, err := e.Client.Update(ctx, l, e.FieldManager); err == nil {
			e.observe(out, now)
			return true
		}
	}
	l, err := e.Client.Get(ctx, e.Namespace, e.Name)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name}, Spec: e.spec(now, nil)}
		if l, err = e.Client.Create(ctx, l, e.FieldManager); err != nil {
			e.failed("create", err)
			return false
		}
		e.observe(l, now)
		return true
	}
	if err != nil {
		e.failed("read", err)
		return false
	}
	if e.last == nil || l.ResourceVersion != e.last.ResourceVersion {
		e.observe(l, now)
	}
	holder := deref(l.Spec.HolderIdentity)
	if holder != "" && holder != e.Identity && now.Before(e.observedAt.Add(e.durationOf(l.Spec))) {
		return false // held, and renewed within its duration as far as we saw
	}
	l.Spec = e.spec(now, &l.Spec)
	if l, err = e.Client.Update(ctx, l, e.FieldManager); err != nil {
		e.failed("write", err)
		return false
	}
	e.observe(l, now)
	return true
}

// spec is the Lease held by this replica at now, after prev (nil: none).
func (e *Election) spec(now time.Time, prev *coordinationv1.LeaseSpec) coordinationv1.LeaseSpec {
	id, secs, at := e.Identity, int32(e.LeaseDuration/time.Second), metav1.NewMicroTime(now)
	s := coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &at, RenewTime: &at, LeaseTransitions: new(int32)}
	if prev == nil {
		return s
	}
	*s.LeaseTransitions = deref(prev.LeaseTransitions)
	if deref(prev.HolderIdentity) == e.Identity && prev.AcquireTime != nil {
		s.AcquireTime = prev.AcquireTime
	} else {
		*s.LeaseTransitions++
	}
	return s
}

// release gives the Lease up when this replica still holds it: no holder,
// for one second, so that another replica acquires it at once.
func (e *Election) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.RenewDeadline)
	defer cancel()
	e.last = nil
	l, err := e.Client.Get(ctx, e.Namespace, e.Name)
	if err != nil || deref(l.Spec.HolderIdentity) != e.Identity {
		return
	}
	none, secs, at := "", int32(1), metav1.NewMicroTime(time.Now())
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &none, LeaseDurationSeconds: &secs, AcquireTime: &at, RenewTime: &at,
		LeaseTransitions: l.Spec.LeaseTransitions}
	if _, err := e.Client.Update(ctx, l, e.FieldManager); err != nil {
		e.failed("release", err)
	}
}

func (e *Election) observe(l *coordinationv1.Lease, at time.Time) {
	e.last, e.observedAt = l.DeepCopy(), at
}

// durationOf is how long the holder of s may go without renewing.
func (e *Election) durationOf(s coordinationv1.LeaseSpec) time.Duration {
	if s.LeaseDurationSeconds == nil {
		return e.LeaseDuration
	}
	return time.Duration(*s.LeaseDurationSeconds) * time.Second
}

func (e *Election) failed(what string, err error) {
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
		e.log().Info("leader lease: "+what+" failed", "lease", e.Namespace+"/"+e.Name, "err", err)
	}
}

func (e *Election) log() *slog.Logger {
	if e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
