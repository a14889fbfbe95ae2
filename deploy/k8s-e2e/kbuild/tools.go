//go:build tools

// Package kbuild pins the Kubernetes commands the k8s-e2e cluster runs. It is
// a scratch module built by scripts/k8s-build.sh outside the clone, never part
// of reprise's own module: k8s.io/kubernetes is not meant to be imported.
package kbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
