package kube

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// Labels and annotations paddock puts on what it makes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "paddock"
	// LabelSandbox names the paddock sandbox on the Sandbox, its pod and its Secret; the
	// NetworkPolicy selects pods by it.
	LabelSandbox = "paddock.dev/sandbox"
	// AnnotationTemplate is the hash of the pod template paddock wrote (templateHash).
	AnnotationTemplate = "paddock.dev/template-hash"
)

// Names inside the pod.
const (
	containerName = "agent"
	volumeName    = "workspace" // the volumeClaimTemplate; its PVC is workspace-<id>
	secretVolume  = "channel"
	tmpVolume     = "tmp"
	usrVolume     = "node-usr"
	portName      = "agent"
	firewallName  = "firewall"
)

// agentCaps are what the agent needs to start commands as the sandbox user and manage
// them (as the container tier's, less DAC_READ_SEARCH, which DAC_OVERRIDE covers for it:
// the set stays within the Pod Security Standards' baseline).
var agentCaps = []corev1.Capability{"SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER", "SYS_CHROOT"}

// SecretName is the name of sandbox id's Secret.
func SecretName(id string) string { return id + "-channel" }

// PVCName is the name of sandbox id's workspace volume claim (the controller's naming:
// template name, dash, Sandbox name).
func PVCName(id string) string { return volumeName + "-" + id }

// runtimeClass is the RuntimeClass of runtime rt, or nil for the cluster's default.
func runtimeClass(c *Config, rt string) (*string, error) {
	if rt == "" {
		rt = "runc"
	}
	class, ok := c.RuntimeClasses[rt]
	switch {
	case !ok && rt == "runc", ok && class == "":
		return nil, nil
	case !ok:
		return nil, fmt.Errorf("runtime %s: this cluster's configuration names no RuntimeClass for it (runner.runtime_classes): %w", rt, errdefs.ErrUnavailable)
	}
	return &class, nil
}

// Envelope is the agent's bootstrap envelope for req.
func Envelope(req Request) *wire.Envelope {
	env := &wire.Envelope{
		Version: wire.EnvelopeVersion, SandboxID: req.ID, Tier: wire.TierContainer, Workspace: wire.WorkspacePath,
		ListenAddr: ":" + strconv.Itoa(wire.PodAgentPort), Env: req.Env, Main: req.Main,
		RunAs: &wire.User{UID: req.UID, GID: req.GID}, HistoryDir: wire.HistoryPath,
		CapabilityKeys: req.CapabilityKeys, FileSizeLimit: int64(req.Limits.FileSize),
		Trampoline: wire.TrampolinePath,
		// No cgroup of their own to hold the commands: the pod's is read-only inside.
		// The kernel's per-user count holds them instead (the sandbox user's processes
		// on the node; see docs/kubernetes.md).
		CommandNproc: req.Limits.Pids,
	}
	return env
}

// NewSecret is sandbox req's Secret: the envelope and the TLS pair the CA issued it.
func NewSecret(c *Config, req Request, pair podtls.Pair, caPEM []byte) (*corev1.Secret, error) {
	var env bytes.Buffer
	if err := wire.WriteEnvelope(&env, Envelope(req)); err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(req.ID), Namespace: c.Namespace, Labels: labels(req.ID)},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			wire.EnvelopeFile: env.Bytes(),
			podtls.CertFile:   pair.Cert,
			podtls.KeyFile:    pair.Key,
			podtls.CAFile:     caPEM,
		},
	}, nil
}

func labels(id string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelSandbox: id}
}

// NewSandbox is the Sandbox object for req.
func NewSandbox(c *Config, req Request) (*sbv1.Sandbox, error) {
	pt, err := PodTemplate(c, req)
	if err != nil {
		return nil, err
	}
	size := req.Limits.Disk
	if size == 0 {
		size = c.WorkspaceSize
	}
	sb := &sbv1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sbv1.GroupVersion.String(), Kind: sbv1.SandboxKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: req.ID, Namespace: c.Namespace, Labels: labels(req.ID),
		},
		Spec: sbv1.SandboxSpec{
			SandboxBlueprint: sbv1.SandboxBlueprint{PodTemplate: pt},
			OperatingMode:    sbv1.SandboxOperatingModeRunning,
		},
	}
	if req.Ephemeral {
		q := resource.NewQuantity(int64(size), resource.BinarySI)
		sb.Spec.PodTemplate.Spec.Volumes = append(sb.Spec.PodTemplate.Spec.Volumes,
			corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: q}}})
	} else {
		sb.Spec.VolumeClaimTemplates = []sbv1.PersistentVolumeClaimTemplate{workspaceClaim(c, req.ID, size)}
	}
	sb.Annotations = map[string]string{AnnotationTemplate: templateHash(sb.Spec.PodTemplate)}
	return sb, nil
}

// workspaceClaim is the volume claim template of a workspace of size bytes.
func workspaceClaim(c *Config, id string, size wire.Size) sbv1.PersistentVolumeClaimTemplate {
	pvc := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(int64(size), resource.BinarySI)}},
	}
	if c.StorageClass != "" {
		pvc.StorageClassName = &c.StorageClass
	}
	return sbv1.PersistentVolumeClaimTemplate{
		EmbeddedObjectMetadata: sbv1.EmbeddedObjectMetadata{Name: volumeName, Labels: labels(id)},
		Spec:                   pvc,
	}
}

// templateHash is a digest of a pod template, to tell paddock's from an edited one.
func templateHash(pt sbv1.PodTemplate) string {
	b, _ := json.Marshal(pt)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// PodTemplate is the pod of sandbox req.
func PodTemplate(c *Config, req Request) (sbv1.PodTemplate, error) {
	class, err := runtimeClass(c, req.Runtime)
	if err != nil {
		return sbv1.PodTemplate{}, err
	}
	res, err := resources(req.Limits)
	if err != nil {
		return sbv1.PodTemplate{}, err
	}
	no, yes, root := false, true, int64(0)
	grace := int64(10)
	secretMode := int32(0o400)
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	ctr := corev1.Container{
		Name:            containerName,
		Image:           c.Image,
		ImagePullPolicy: corev1.PullPolicy(c.ImagePullPolicy),
		Command:         []string{wire.AgentPath, wire.PodFlag, wire.PodDir},
		Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: wire.PodAgentPort, Protocol: corev1.ProtocolTCP}},
		Resources:       res,
		// The agent is root in the pod with a few capabilities, so that the commands it
		// starts as the sandbox user can neither signal it nor read its history.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &root, RunAsNonRoot: &no, Privileged: &no, AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem: &yes,
			Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: agentCaps},
			SeccompProfile:         runtimeDefault,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: secretVolume, MountPath: wire.PodDir, ReadOnly: true},
			{Name: volumeName, MountPath: wire.WorkspacePath, SubPath: "workspace"},
			{Name: volumeName, MountPath: wire.HistoryPath, SubPath: "history"},
			{Name: tmpVolume, MountPath: "/tmp"},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	vols := []corev1.Volume{
		{Name: secretVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: SecretName(req.ID), DefaultMode: &secretMode}}},
		{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: tmpDir(req.Limits)}},
	}
	if c.NodeUsr {
		dir := corev1.HostPathDirectory
		vols = append(vols, corev1.Volume{Name: usrVolume, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/usr", Type: &dir}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: usrVolume, MountPath: "/usr", ReadOnly: true})
	}
	var inits []corev1.Container
	if c.PodFirewall {
		var usr []corev1.VolumeMount
		if c.NodeUsr {
			usr = ctr.VolumeMounts[len(ctr.VolumeMounts)-1:]
		}
		inits = append(inits, firewallContainer(c, req.UID, usr))
	}
	return sbv1.PodTemplate{
		ObjectMeta: sbv1.PodMetadata{Labels: labels(req.ID)},
		Spec: corev1.PodSpec{
			InitContainers:                inits,
			Containers:                    []corev1.Container{ctr},
			Volumes:                       vols,
			RuntimeClassName:              class,
			NodeSelector:                  c.NodeSelector,
			Tolerations:                   tolerations(c),
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
		},
	}, nil
}

// resources maps the sandbox's memory and CPU limits to the container's, requested as
// much as limited (the pod is Guaranteed when both are set).
func resources(l wire.Limits) (corev1.ResourceRequirements, error) {
	rl := corev1.ResourceList{}
	if l.Memory > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(l.Memory), resource.BinarySI)
	}
	if l.CPUs > 0 {
		milli := int64(l.CPUs*1000 + 0.5)
		if milli < 1 {
			return corev1.ResourceRequirements{}, fmt.Errorf("cpus %g: below a thousandth of a CPU: %w", l.CPUs, errdefs.ErrInvalidArgument)
		}
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}, nil
	}
	return corev1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()}, nil
}

// tmpDir is /tmp: in memory, counted as the sandbox's, when its limits size it (Tmp);
// else on the node's disk, bounded by the sandbox's disk or 1GiB.
func tmpDir(l wire.Limits) *corev1.EmptyDirVolumeSource {
	if l.Tmp > 0 {
		q := resource.NewQuantity(int64(l.Tmp), resource.BinarySI)
		return &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: q}
	}
	size := int64(1 << 30)
	if l.Disk > 0 {
		size = int64(l.Disk)
	}
	return &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(size, resource.BinarySI)}
}
