// Command kubectl-gce_maintenance is a kubectl plugin: the fleet's maintenance
// at a glance (status), why a node is or is not in maintenance (why), a
// manual trigger of one node or several with a pre-flight check (trigger),
// a person's request for a faulty node's repair (report-faulty), and a
// policy checked before it is applied (policy validate). It reads the Node
// protocol and the project's Events, and writes nothing but the
// perform-maintenance label and the report-faulty label (with its
// description). Install it by copying the binary onto PATH:
// kubectl finds it as `kubectl gce-maintenance`.
//
// Exit codes: 0 done; 1 an error (no such node, no permission, the API
// server, the project not installed); 2 bad usage; 3 a trigger the
// pre-flight check refuses, or one the agent rejected.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitRefused = 3
)

// version is stamped at build time: -ldflags "-X main.version=...";
// --version prints it as the agent and the aggregator do.
var version = "dev"

// errRefused marks a trigger refused by the pre-flight check or the agent.
var errRefused = errors.New("refused")

// errUsage marks bad usage.
var errUsage = errors.New("usage")

// app is one invocation: where it reads the cluster, and its clock and
// output (tests set them).
type app struct {
	flags  *kubeFlags
	now    func() time.Time
	loc    *time.Location
	out    io.Writer
	errOut io.Writer
	in     io.Reader
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a := &app{flags: newKubeFlags(), now: time.Now, loc: time.Local, out: os.Stdout, errOut: os.Stderr, in: os.Stdin}
	os.Exit(a.run(ctx, os.Args[1:]))
}

// run runs the command line args and returns the exit code.
func (a *app) run(ctx context.Context, args []string) int {
	root := a.command()
	root.SetArgs(args)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errRefused):
		fmt.Fprintln(a.errOut, "kubectl gce-maintenance:", err)
		return exitRefused
	case errors.Is(err, errUsage):
		fmt.Fprintln(a.errOut, "kubectl gce-maintenance:", err)
		return exitUsage
	}
	fmt.Fprintln(a.errOut, "kubectl gce-maintenance:", err)
	return exitError
}

// command is the plugin as kubectl users expect one: its help names it
// `kubectl gce-maintenance`, -v is kubectl's log verbosity (client-go logs
// its requests from 6), --version has no shorthand, and shell completion
// (kubectl's, through the kubectl_complete-gce_maintenance script the release
// ships, or `completion`) completes commands, flags and node names.
func (a *app) command() *cobra.Command {
	root := &cobra.Command{
		Use:           "gce-maintenance",
		Short:         "The maintenance of GPU and TPU nodes on Compute Engine, as maintenance-handler runs it",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gce-maintenance"},
	}
	root.SetVersionTemplate("maintenance-handler kubectl-gce_maintenance {{.Version}}\n")
	root.Flags().Bool("version", false, "Print the plugin's version.")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	a.flags.addFlags(root.PersistentFlags())
	addVerbosity(root.PersistentFlags())
	root.AddCommand(a.statusCommand(), a.whyCommand(), a.triggerCommand(), a.reportFaultyCommand(), a.policyCommand())
	return root
}
