package compute

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	gcemetadata "cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2"
	"k8s.io/utils/clock"

	"github.com/maintenance-handler/maintenance-handler/backoff"
)

// The IAM permissions of the two Compute Engine methods the agent calls.
const (
	// Permission is what instances.performMaintenance needs.
	Permission = "compute.instances.performMaintenance"
	// OperationPermission is what zoneOperations.get needs, to follow the
	// operation a performMaintenance call returns.
	OperationPermission = "compute.zoneOperations.get"
	// ReportPermission is what instances.reportHostAsFaulty needs, as
	// Google's "Report faulty host" page names it (AI Hypercomputer
	// documentation): no IAM permission bears the method's own name, and a
	// custom role that names an unknown permission is refused whole.
	ReportPermission = "compute.instances.update"
	// GetPermission is what instances.get needs, to read a Spot VM's
	// preemption notice (optional: --preemption-notice says it instead).
	GetPermission = "compute.instances.get"
)

// Method is one Compute Engine method the agent calls.
type Method struct {
	Name, Permission string
}

// Methods are every Compute Engine method this package calls with the
// default flags, with the IAM permission each needs: the role the README
// documents grants these (a test keeps the two in step). instances.get
// is read for every VM by the default --known-end=auto.
var Methods = []Method{
	{"instances.performMaintenance", Permission},
	{"zoneOperations.get", OperationPermission},
	{"instances.reportHostAsFaulty", ReportPermission},
	{"instances.get", GetPermission},
}

// OptionalMethods are the methods called only where flags ask for them
// (--reservation-groups, --reservations), with the permission each
// needs.
var OptionalMethods = []Method{
	{"reservationSubBlocks.performMaintenance", SubBlockPermission},
	{"reservationBlocks.performMaintenance", BlockPermission},
	{"reservationSubBlocks.list", SubBlockListPermission},
	{"reservationBlocks.list", BlockListPermission},
}

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
	// Endpoint is the Compute API base URL, ending in /compute/v1/; empty
	// means Google's.
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

// DefaultEndpoint is the Compute Engine API's base URL.
const DefaultEndpoint = "https://compute.googleapis.com/compute/v1/"

// Maintainer calls performMaintenance or reportHostAsFaulty and reads the
// operation they return: three REST calls, made with net/http and an OAuth2 token, which is all the
// agent needs of the Compute Engine API (a generated client would add about
// 20 MB to a binary every accelerator node pulls).
type Maintainer struct {
	hc       *http.Client
	endpoint string
	opts     Options
}

// NewMaintainer returns a Maintainer.
func NewMaintainer(_ context.Context, opts Options) (*Maintainer, error) {
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
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("compute endpoint %q: want an http(s) URL", endpoint)
	}
	if !strings.HasSuffix(endpoint, "/") {
		endpoint += "/"
	}
	return &Maintainer{
		hc: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &oauth2.Transport{Source: opts.TokenSource, Base: http.DefaultTransport},
		},
		endpoint: endpoint,
		opts:     opts,
	}, nil
}

// apiError is a Google API error answer.
type apiError struct {
	Code    int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d: %s", e.Code, e.Message) }

// call makes one request to the Compute API, with body as its JSON when
// not nil, and decodes an Operation.
func (m *Maintainer) call(ctx context.Context, method, path string, query url.Values, body any) (*operation, error) {
	u := m.endpoint + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var payload io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		payload = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, payload)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(answer))
		if json.Unmarshal(answer, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return nil, &apiError{Code: resp.StatusCode, Message: msg}
	}
	var op operation
	if err := json.Unmarshal(answer, &op); err != nil {
		return nil, fmt.Errorf("decode the operation: %w", err)
	}
	return &op, nil
}

func instancePath(inst Instance) string {
	return "projects/" + url.PathEscape(inst.Project) + "/zones/" + url.PathEscape(inst.Zone) + "/instances/" + url.PathEscape(inst.Name)
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
	return m.post(ctx, inst, "performMaintenance", Permission, requestID, account, nil)
}

// The fault report's body (InstancesReportHostAsFaultyRequest).
type faultReport struct {
	DisruptionSchedule string        `json:"disruptionSchedule"`
	FaultReasons       []faultReason `json:"faultReasons"`
}

type faultReason struct {
	Behavior    string `json:"behavior"`
	Description string `json:"description,omitempty"`
}

// ReportHostAsFaulty reports inst's host as faulty, with behavior (one of
// Compute Engine's fault behaviors) and description, to be disrupted at
// once (IMMEDIATE, the only schedule Compute Engine accepts today), and
// returns the operation's name. It retries transient failures until ctx
// ends, with requestID on every attempt.
func (m *Maintainer) ReportHostAsFaulty(ctx context.Context, inst Instance, requestID, behavior, description string) (string, error) {
	return m.report(ctx, inst, requestID, behavior, description, "")
}

func (m *Maintainer) report(ctx context.Context, inst Instance, requestID, behavior, description, account string) (string, error) {
	body := faultReport{DisruptionSchedule: "IMMEDIATE", FaultReasons: []faultReason{{Behavior: behavior, Description: description}}}
	return m.post(ctx, inst, "reportHostAsFaulty", ReportPermission, requestID, account, body)
}

// post calls the instance method verb on inst (which needs permission),
// with requestID and body, retrying transient failures until ctx ends;
// account, when set, names the caller in a permission error instead of
// Options.ServiceAccount.
func (m *Maintainer) post(ctx context.Context, inst Instance, verb, permission, requestID, account string, body any) (string, error) {
	return m.postTo(ctx, instancePath(inst), inst.String(), verb, permission, requestID, account, body)
}

// postTo is post on the resource at path, named what in errors and logs.
func (m *Maintainer) postTo(ctx context.Context, path, what, verb, permission, requestID, account string, body any) (string, error) {
	if account == "" {
		account = m.opts.ServiceAccount
	}
	query := url.Values{}
	if requestID != "" {
		query.Set("requestId", requestID)
	}
	for attempt := 1; ; attempt++ {
		op, err := m.call(ctx, http.MethodPost, path+"/"+verb, query, body)
		if err == nil {
			return op.Name, nil
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("%s on %s: gave up after %d attempts: %w", verb, what, attempt, err)
		}
		var aerr *apiError
		if errors.As(err, &aerr) {
			switch {
			case aerr.Code == http.StatusForbidden:
				return "", fmt.Errorf("%s on %s: %w: %s lacks the IAM permission %s (or the VM lacks the cloud-platform or compute access scope): %s",
					verb, what, ErrPermissionDenied, account, permission, aerr.Message)
			case aerr.Code == http.StatusTooManyRequests || aerr.Code >= 500 || aerr.Code == http.StatusUnauthorized:
				// transient (401: a token that expired in flight)
			default:
				return "", fmt.Errorf("%s on %s: %w (%d): %s", verb, what, ErrRefused, aerr.Code, aerr.Message)
			}
		}
		delay := m.opts.Backoff.Delay(attempt)
		m.opts.Logger.Warn(verb+" failed; retrying", "resource", what, "attempt", attempt, "err", err, "retry_in", delay)
		if err := m.sleep(ctx, delay); err != nil {
			return "", fmt.Errorf("%s on %s: gave up after %d attempts: %w", verb, what, attempt, err)
		}
	}
}

func (m *Maintainer) sleep(ctx context.Context, d time.Duration) error {
	return backoff.Wait(ctx, m.opts.Clock, d)
}

// isForbidden: err is Compute Engine's 403.
func isForbidden(err error) bool {
	var aerr *apiError
	return errors.As(err, &aerr) && aerr.Code == http.StatusForbidden
}
