package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// firewallContainer is the init container of Config.PodFirewall: it rejects, in the pod's
// network namespace, which every container of the pod shares, whatever the sandbox user
// (uid) sends off the loopback, for IPv4 and IPv6. The agent runs as root and is not
// matched: it answers the control plane. Packets no process sent (a reset, a SYN-ACK) are
// not matched either.
func firewallContainer(c *Config, uid uint32, mounts []corev1.VolumeMount) corev1.Container {
	script := fmt.Sprintf(`set -e
for t in iptables ip6tables; do
  bin=$(command -v $t-nft || command -v $t)
  $bin -A OUTPUT ! -o lo -m owner --uid-owner %d -j REJECT
done`, uid)
	no, yes, root := false, true, int64(0)
	return corev1.Container{
		Name:            firewallName,
		Image:           c.Image,
		ImagePullPolicy: corev1.PullPolicy(c.ImagePullPolicy),
		Command:         []string{"/bin/sh", "-c", script},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &root, RunAsNonRoot: &no, Privileged: &no, AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem: &yes,
			Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
			SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts:             mounts,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}
