//go:build tools

// Package controlplane pins the Kubernetes control plane that the control-plane test tier runs
// against. Nothing here is shipped: `go build` of the imported commands produces etcd,
// kube-apiserver and kube-controller-manager for tests/e2e (see tests/e2e/src/binaries.rs).
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
