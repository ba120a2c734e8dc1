//go:build tools

// Package controlplane pins the Kubernetes release every test tier runs: etcd, kube-apiserver and
// kube-controller-manager for the control-plane tier (tests/e2e/src/binaries.rs), and with them
// kubelet, kubeadm, kube-proxy, kube-scheduler and kubectl for the kind tier's node image
// (hack/kind). Nothing here is shipped.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
