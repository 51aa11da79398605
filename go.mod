module github.com/maintenance-handler/maintenance-handler

go 1.26.0

require (
	cloud.google.com/go/compute/metadata v0.10.0
	github.com/google/go-cmp v0.7.0
	golang.org/x/mod v0.42.0
	golang.org/x/sys v0.49.0
	k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab
)
