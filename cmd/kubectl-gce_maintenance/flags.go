package main

import (
	goflag "flag"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// kubeFlags are kubectl's flags for where and as whom to connect
// (--kubeconfig, --context, --cluster, --user, --namespace, --server,
// --token, --as, --request-timeout and the rest of clientcmd's), read as
// kubectl reads them. They are bound with client-go's clientcmd rather
// than cli-runtime's genericclioptions, which brings kustomize and the
// OpenAPI models into the binary (18 MB of a 47 MB plugin) for flags it
// does not add.
type kubeFlags struct {
	loading   clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
}

func newKubeFlags() *kubeFlags {
	return &kubeFlags{loading: *clientcmd.NewDefaultClientConfigLoadingRules()}
}

func (f *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	clientcmd.BindOverrideFlags(&f.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// config is the client configuration the flags and kubeconfig say.
func (f *kubeFlags) config() (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&f.loading, &f.overrides).ClientConfig()
}

// addVerbosity adds kubectl's -v/--v: client-go's log verbosity (klog's),
// which logs each request from 6 and each response body from 8.
func addVerbosity(fs *pflag.FlagSet) {
	klogFlags := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(klogFlags)
	v := pflag.PFlagFromGoFlag(klogFlags.Lookup("v"))
	v.Shorthand = "v"
	v.Usage = "Log level verbosity, as kubectl's: 6 logs each API request, 8 each response body."
	fs.AddFlag(v)
}

// completeNodes completes a node name, from the cluster's Nodes (their
// names only: metadata, at most 5,000), leaving out those already named.
func (a *app) completeNodes(cmd *cobra.Command, named []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := a.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	list, err := c.ListNodes(cmd.Context(), metav1.ListOptions{Limit: 5000})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var out []cobra.Completion
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, prefix) && !slices.Contains(named, n.Name) {
			out = append(out, n.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
