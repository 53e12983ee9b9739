// Command devcluster is one multi-call binary holding the pieces of a real
// Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, built from their published Go modules, and the kubelet that
// `pitcrew devcluster up --real-nodes` runs beside kwok's simulated nodes.
//
// Why one binary: linking four Kubernetes binaries separately costs four times
// the link time and disk for code that is 90 % shared; dispatching on the
// first argument keeps the upstream command-line interfaces unchanged, so the
// Python launcher passes exactly the flags the real components document.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: devcluster etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet [flags]")
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	if name == "etcd" {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return
	}
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "devcluster: unknown component %q\n", name)
		os.Exit(2)
	}
	command := newCommand()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}
