package compute

import (
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// googleComputeTokenSource is the VM's default service account's token,
// from instance/service-accounts/default/token (GCE_METADATA_HOST points it
// at another server), refreshed before it expires.
func googleComputeTokenSource() oauth2.TokenSource {
	return google.ComputeTokenSource("", "https://www.googleapis.com/auth/cloud-platform")
}
