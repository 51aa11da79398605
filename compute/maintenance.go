package compute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2"
	computev1 "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
)

// Permission is the IAM permission performMaintenance needs.
const Permission = "compute.instances.performMaintenance"

// Instance names a VM.
type Instance struct {
	Project, Zone, Name string
}

func (i Instance) String() string {
	return fmt.Sprintf("projects/%s/zones/%s/instances/%s", i.Project, i.Zone, i.Name)
}

// InstanceFromProviderID parses a Node's spec.providerID, gce://project/zone/name.
func InstanceFromProviderID(id string) (Instance, error) {
	rest, ok := strings.CutPrefix(id, "gce://")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Instance{}, fmt.Errorf("providerID %q is not gce://project/zone/name", id)
	}
	return Instance{Project: parts[0], Zone: parts[1], Name: parts[2]}, nil
}

// InstanceFromMetadata reads the VM's project, zone and name from the
// metadata server.
func InstanceFromMetadata(ctx context.Context, c *gcemetadata.Client) (Instance, error) {
	project, err := c.GetWithContext(ctx, "project/project-id")
	if err != nil {
		return Instance{}, fmt.Errorf("read project id: %w", err)
	}
	zone, err := c.GetWithContext(ctx, "instance/zone")
	if err != nil {
		return Instance{}, fmt.Errorf("read zone: %w", err)
	}
	name, err := c.GetWithContext(ctx, "instance/name")
	if err != nil {
		return Instance{}, fmt.Errorf("read instance name: %w", err)
	}
	zone = zone[strings.LastIndexByte(zone, '/')+1:]
	return Instance{Project: strings.TrimSpace(project), Zone: strings.TrimSpace(zone), Name: strings.TrimSpace(name)}, nil
}

// ErrPermissionDenied: the service account may not call performMaintenance.
var ErrPermissionDenied = errors.New("permission denied")

// ErrRefused: Compute Engine refused the call (for example, nothing is
// pending, or the maintenance cannot be rescheduled).
var ErrRefused = errors.New("refused")

// Options configure a Maintainer.
type Options struct {
	// Endpoint is the Compute API base path; empty means Google's.
	Endpoint string
	// TokenSource authenticates calls; nil means the VM's default service
	// account through the metadata server.
	TokenSource oauth2.TokenSource
	// ServiceAccount names the account in error messages.
	ServiceAccount string
	// Backoff spaces the attempts; zero is backoff.Default.
	Backoff backoff.Policy
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Maintainer calls performMaintenance.
type Maintainer struct {
	svc  *computev1.Service
	opts Options
}

// NewMaintainer returns a Maintainer.
func NewMaintainer(ctx context.Context, opts Options) (*Maintainer, error) {
	if opts.TokenSource == nil {
		opts.TokenSource = googleComputeTokenSource()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = "the node's service account"
	}
	clientOpts := []option.ClientOption{
		option.WithHTTPClient(&http.Client{
			Timeout:   30 * time.Second,
			Transport: &oauth2.Transport{Source: opts.TokenSource, Base: http.DefaultTransport},
		}),
	}
	if opts.Endpoint != "" {
		clientOpts = append(clientOpts, option.WithEndpoint(opts.Endpoint))
	}
	svc, err := computev1.NewService(ctx, clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("create compute client: %w", err)
	}
	return &Maintainer{svc: svc, opts: opts}, nil
}

// PerformMaintenance asks Compute Engine to start inst's pending maintenance
// now and returns the operation's name. It retries transient failures until
// ctx ends, with requestID on every attempt.
func (m *Maintainer) PerformMaintenance(ctx context.Context, inst Instance, requestID string) (string, error) {
	return m.perform(ctx, inst, requestID, "")
}

// perform is PerformMaintenance; account, when set, names the caller in a
// permission error instead of Options.ServiceAccount.
func (m *Maintainer) perform(ctx context.Context, inst Instance, requestID, account string) (string, error) {
	if account == "" {
		account = m.opts.ServiceAccount
	}
	for attempt := 1; ; attempt++ {
		op, err := m.svc.Instances.PerformMaintenance(inst.Project, inst.Zone, inst.Name).RequestId(requestID).Context(ctx).Do()
		if err == nil {
			return op.Name, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("perform maintenance on %s: gave up after %d attempts: %w", inst, attempt, err)
		}
		var gerr *googleapi.Error
		if errors.As(err, &gerr) {
			switch {
			case gerr.Code == http.StatusForbidden:
				return "", fmt.Errorf("perform maintenance on %s: %w: %s lacks the IAM permission %s (or the VM lacks the cloud-platform or compute access scope): %s",
					inst, ErrPermissionDenied, account, Permission, gerr.Message)
			case gerr.Code == http.StatusTooManyRequests || gerr.Code >= 500 || gerr.Code == http.StatusUnauthorized:
				// transient (401: a token that expired in flight)
			default:
				return "", fmt.Errorf("perform maintenance on %s: %w (%d): %s", inst, ErrRefused, gerr.Code, gerr.Message)
			}
		}
		delay := m.opts.Backoff.Delay(attempt)
		m.opts.Logger.Warn("performMaintenance failed; retrying", "instance", inst.String(), "attempt", attempt, "err", err, "retry_in", delay)
		t := m.opts.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("perform maintenance on %s: gave up after %d attempts: %w", inst, attempt, err)
		case <-t.C():
		}
	}
}

// ErrOperationFailed: the operation Compute Engine returned for an
// accepted call ended with an error.
var ErrOperationFailed = errors.New("operation failed")

// operationPoll is the time between two reads of a running operation.
const operationPoll = 10 * time.Second

// WaitOperation reads inst's zonal operation name until it is DONE and
// returns nil, or ErrOperationFailed with Compute Engine's errors. Failed
// reads are retried until ctx ends.
func (m *Maintainer) WaitOperation(ctx context.Context, inst Instance, name string) error {
	failures := 0
	for {
		op, err := m.svc.ZoneOperations.Get(inst.Project, inst.Zone, name).Context(ctx).Do()
		delay := operationPoll
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("wait for operation %s on %s: %w", name, inst, err)
		case err != nil:
			failures++
			delay = m.opts.Backoff.Delay(failures)
			m.opts.Logger.Warn("reading the operation failed; retrying", "operation", name, "err", err, "retry_in", delay)
		case op.Status == "DONE" && op.Error != nil && len(op.Error.Errors) > 0:
			msgs := make([]string, 0, len(op.Error.Errors))
			for _, e := range op.Error.Errors {
				msgs = append(msgs, e.Code+": "+e.Message)
			}
			return fmt.Errorf("operation %s on %s: %w: %s", name, inst, ErrOperationFailed, strings.Join(msgs, "; "))
		case op.Status == "DONE":
			return nil
		default:
			failures = 0
		}
		t := m.opts.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for operation %s on %s: %w", name, inst, ctx.Err())
		case <-t.C():
		}
	}
}
