//go:build tools

// Package coscheduling pins what the coscheduling test runs against: scheduler-plugins'
// kube-scheduler with its Coscheduling plugin, and the control plane of the Kubernetes release
// that scheduler is built with (etcd, kube-apiserver, kube-controller-manager), built by
// tests/e2e/src/binaries.rs. Nothing here is shipped.
package coscheduling

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
