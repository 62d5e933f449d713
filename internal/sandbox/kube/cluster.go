package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbversioned "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	sbclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/typed/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/wire/channel"
	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// Cluster is the control plane's handle on the cluster: the API clients, the channel's
// CA and its own client certificate.
type Cluster struct {
	cfg  Config
	host string // the API server, for messages
	core corev1client.CoreV1Interface
	sbx  sbclient.SandboxInterface
	ca   *podtls.CA
	cp   *podtls.Renewer // the control plane's client certificate
	log  *slog.Logger
	pool *pool
	tmpl templatePools // the template pools (templates.go)

	// sbxAll feeds the shared informer (tracker), started on first use.
	sbxAll    sbversioned.Interface
	trackOnce sync.Once
	tr        *tracker
	stopTrack context.CancelFunc
}

// Open connects to the cluster cfg names (cfg filled and valid) and loads or makes the CA.
// It does not reach the API server: Health does.
func Open(cfg Config, log *slog.Logger) (*Cluster, error) {
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "paddock"
	// client-go's default (5 requests/s) would hold a busy control plane to a sandbox a
	// second: a start is a few requests, and waits read the informer's cache, not the API.
	rc.QPS, rc.Burst = 200, 400
	core, err := corev1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	sc, err := sbversioned.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("agent-sandbox client: %w", err)
	}
	ca := cfg.CA
	if ca == nil {
		if ca, err = LoadCA(cfg.CADir); err != nil {
			return nil, err
		}
	}
	ca.Lifetime = cfg.CertLifetime
	cp, err := ca.NewRenewer()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, host: rc.Host, core: core, sbx: sc.AgentsV1beta1().Sandboxes(cfg.Namespace), sbxAll: sc, ca: ca, cp: cp, log: log}
	if err := c.openPool(rc); err != nil {
		return nil, err
	}
	return c, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("runner.kubeconfig is empty and paddock is not in a pod (%v): name a kubeconfig: %w", err, errdefs.ErrInvalidArgument)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("runner.kubeconfig %s: %w: %w", kubeconfig, err, errdefs.ErrInvalidArgument)
	}
	return rc, nil
}

// LoadCA reads the channel's CA from dir, or makes one there (the key 0600, the directory
// 0700) on first use.
func LoadCA(dir string) (*podtls.CA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	cert, cerr := os.ReadFile(certPath)
	key, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		ca, err := podtls.ParseCA(cert, key)
		if err != nil {
			return nil, fmt.Errorf("the sandbox channel's CA in %s: %w", dir, err)
		}
		return ca, nil
	}
	if !os.IsNotExist(cerr) || !os.IsNotExist(kerr) {
		return nil, fmt.Errorf("the sandbox channel's CA in %s: %w", dir, errors.Join(cerr, kerr))
	}
	ca, err := podtls.NewCA()
	if err != nil {
		return nil, err
	}
	key, err = ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA: %w", err)
	}
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA: %w", err)
	}
	if err := os.WriteFile(certPath, ca.CertPEM(), 0o644); err != nil {
		return nil, fmt.Errorf("the sandbox channel's CA: %w", err)
	}
	return ca, nil
}

// Health reports whether the API server answers and serves the Sandbox API.
func (c *Cluster) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.sbx.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return c.apiError("list sandboxes", err)
	}
	return nil
}

// apiError wraps an API error with what was being done, mapped to the taxonomy: an API
// server that cannot be reached says so, with its address.
func (c *Cluster) apiError(what string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		if strings.Contains(err.Error(), "the server could not find the requested resource") {
			return fmt.Errorf("%s: the cluster at %s does not serve agents.x-k8s.io/v1beta1 Sandboxes: install the agent-sandbox CRDs and controller (docs/kubernetes.md): %w", what, c.host, errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrNotFound)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrAlreadyExists)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the cluster refused paddock's credentials (%v): see the RBAC in docs/kubernetes.md: %w", what, err, errdefs.ErrPermissionDenied)
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInvalidArgument)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrStale)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%s: the Kubernetes API server at %s is unreachable: %v: %w", what, c.host, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrUnavailable)
}

// Start starts sandbox req: it makes its Sandbox, or, for one paddock made before (a
// stopped sandbox), reconciles it and sets it Running; gives the pod a fresh Secret; waits
// for the pod; and dials its agent.
func (c *Cluster) Start(ctx context.Context, req Request, persistent bool) (*Sandbox, error) {
	return c.start(ctx, req, persistent, true)
}

// Place is Start without the agent: it makes the Sandbox and its Secret and waits until
// the controller reports it Ready with an address, as the shared informer sees it, and
// then follows it as Start does; it dials nothing. A simulated node's pod (KWOK) runs no
// agent, so the scale test measures this.
func (c *Cluster) Place(ctx context.Context, req Request, persistent bool) (*Sandbox, error) {
	return c.start(ctx, req, persistent, false)
}

func (c *Cluster) start(ctx context.Context, req Request, persistent, dial bool) (*Sandbox, error) {
	if persistent && req.Ephemeral {
		return nil, fmt.Errorf("sandbox %s: a persistent sandbox's workspace must outlive its pod: not on an ephemeral volume: %w", req.ID, errdefs.ErrInvalidArgument)
	}
	want, err := NewSandbox(&c.cfg, req)
	if err != nil {
		return nil, err
	}
	pair, err := c.ca.IssueSandbox(req.ID)
	if err != nil {
		return nil, err
	}
	secret, err := NewSecret(&c.cfg, req, pair, c.ca.CertPEM())
	if err != nil {
		return nil, err
	}
	c.track() // the informer lists while the objects are made
	existing, err := c.sbx.Get(ctx, req.ID, metav1.GetOptions{})
	var made *sbv1.Sandbox
	switch {
	case apierrors.IsNotFound(err):
		made, err = c.create(ctx, want, secret)
	case err != nil:
		err = c.apiError("sandbox "+req.ID, err)
	default:
		made, err = c.resume(ctx, existing, want, secret)
	}
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{c: c, ID: req.ID, persistent: persistent, want: want, Agent: sandbox.Agent{AgentExited: make(chan struct{})}, pair: pair,
		// The template as the API server stored it, which later reads are compared with.
		template: templateHash(made.Spec.PodTemplate)}
	if err := c.connect(ctx, sb, made.Generation, dial); err != nil {
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			c.log.Warn("clean up after a failed start", "sandbox", req.ID, "err", derr)
		}
		return nil, err
	}
	sb.follow(true)
	return sb, nil
}

// create makes the Secret, then the Sandbox, then hands the Secret to the Sandbox, so
// that deleting the Sandbox deletes it too.
func (c *Cluster) create(ctx context.Context, want *sbv1.Sandbox, secret *corev1.Secret) (*sbv1.Sandbox, error) {
	if err := c.putSecret(ctx, secret); err != nil {
		return nil, err
	}
	made, err := c.sbx.Create(ctx, want, metav1.CreateOptions{FieldManager: ManagedBy})
	if err != nil {
		_ = c.core.Secrets(c.cfg.Namespace).Delete(context.WithoutCancel(ctx), secret.Name, metav1.DeleteOptions{})
		return nil, c.apiError("create sandbox "+want.Name, err)
	}
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q}]}}`,
		sbv1.GroupVersion.String(), sbv1.SandboxKind, made.Name, made.UID)
	if _, err := c.core.Secrets(c.cfg.Namespace).Patch(ctx, secret.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return nil, c.apiError("give the channel's Secret to sandbox "+want.Name, err)
	}
	return made, nil
}

// putSecret creates secret, or replaces the one a stopped sandbox left.
func (c *Cluster) putSecret(ctx context.Context, secret *corev1.Secret) error {
	secrets := c.core.Secrets(c.cfg.Namespace)
	_, err := secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: ManagedBy})
	if apierrors.IsAlreadyExists(err) {
		var old *corev1.Secret
		if old, err = secrets.Get(ctx, secret.Name, metav1.GetOptions{}); err == nil {
			if old.Labels[LabelManagedBy] != ManagedBy || old.Labels[LabelSandbox] != secret.Labels[LabelSandbox] {
				return fmt.Errorf("the Secret %s/%s exists and is not paddock's: %w", c.cfg.Namespace, secret.Name, errdefs.ErrFailedPrecondition)
			}
			old.Data, old.Type = secret.Data, secret.Type
			_, err = secrets.Update(ctx, old, metav1.UpdateOptions{FieldManager: ManagedBy})
		}
	}
	if err != nil {
		return c.apiError("the channel's Secret "+secret.Name, err)
	}
	return nil
}

// resume takes back a Sandbox that exists: it must be paddock's (by its labels) with
// paddock's volume; its pod template is written over with paddock's, whatever it holds
// now, and it is set Running.
func (c *Cluster) resume(ctx context.Context, have, want *sbv1.Sandbox, secret *corev1.Secret) (*sbv1.Sandbox, error) {
	if err := owned(have, want); err != nil {
		return nil, err
	}
	if err := c.putSecret(ctx, secret); err != nil {
		return nil, err
	}
	var made *sbv1.Sandbox
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		made, err = c.update(ctx, have, want, sbv1.SandboxOperatingModeRunning)
		if apierrors.IsConflict(err) {
			// The controller wrote it meanwhile: take the latest, checked again.
			fresh, gerr := c.sbx.Get(ctx, want.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if oerr := owned(fresh, want); oerr != nil {
				return oerr
			}
			have = fresh
		}
		return err
	})
	if err != nil {
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			return nil, err
		}
		return nil, c.apiError("resume sandbox "+want.Name, err)
	}
	return made, nil
}

// update writes want's pod template over have's, with mode.
func (c *Cluster) update(ctx context.Context, have, want *sbv1.Sandbox, mode sbv1.SandboxOperatingMode) (*sbv1.Sandbox, error) {
	have = have.DeepCopy()
	have.Spec.PodTemplate = *want.Spec.PodTemplate.DeepCopy()
	have.Spec.OperatingMode = mode
	have.Spec.Service, have.Spec.Lifecycle = nil, sbv1.Lifecycle{}
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	have.Annotations[AnnotationTemplate] = want.Annotations[AnnotationTemplate]
	return c.sbx.Update(ctx, have, metav1.UpdateOptions{FieldManager: ManagedBy})
}

// writeBack puts paddock's pod template back over a hand-edited Sandbox, suspended, and
// deletes the pod, which may have been made from the edit.
func (c *Cluster) writeBack(ctx context.Context, live, want *sbv1.Sandbox) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		_, err := c.update(ctx, live, want, sbv1.SandboxOperatingModeSuspended)
		if apierrors.IsConflict(err) {
			// The controller wrote it meanwhile: write over the latest.
			if fresh, gerr := c.sbx.Get(ctx, want.Name, metav1.GetOptions{}); gerr == nil {
				live = fresh
			}
		}
		return err
	})
	if err != nil {
		return c.apiError("write sandbox "+want.Name+" back", err)
	}
	err = c.core.Pods(c.cfg.Namespace).Delete(ctx, want.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.apiError("delete the pod of sandbox "+want.Name, err)
	}
	return nil
}

// owned checks that have is a Sandbox paddock made for sandbox want, with the volume
// claims paddock gives it (the workspace's, or none for an ephemeral workspace).
func owned(have, want *sbv1.Sandbox) error {
	id := want.Name
	if have.Labels[LabelManagedBy] != ManagedBy || have.Labels[LabelSandbox] != id {
		return fmt.Errorf("the Sandbox %s/%s exists and paddock did not make it (labels %s=%s, %s=%s): %w",
			have.Namespace, have.Name, LabelManagedBy, ManagedBy, LabelSandbox, id, errdefs.ErrFailedPrecondition)
	}
	vct, wvct := have.Spec.VolumeClaimTemplates, want.Spec.VolumeClaimTemplates
	if len(vct) != len(wvct) || len(vct) > 0 && vct[0].Name != volumeName {
		return fmt.Errorf("the Sandbox %s/%s: its volumes are not the workspace paddock gave it: %w", have.Namespace, have.Name, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// connect waits for sb's pod (made from the Sandbox at generation gen or later) and, when
// dial is set, opens the channel to its agent, checking that the agent is the sandbox's.
func (c *Cluster) connect(ctx context.Context, sb *Sandbox, gen int64, dial bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	held := c.newHeld(sb.ID)
	pod, err := c.waitReady(ctx, sb.obj(), gen, held)
	if err != nil {
		if held.onLostNode() {
			// Its pod is still the lost node's: stopping it must not wait for that pod.
			sb.mu.Lock()
			sb.nodeLost = true
			sb.mu.Unlock()
		}
		return err
	}

	sb.Node, sb.PodIP, sb.podUID = pod.Spec.NodeName, pod.Status.PodIP, pod.UID
	if !dial {
		return nil
	}
	tc := c.ca.ClientConfigFunc(c.cp.Certificate, sb.ID)
	addr := net.JoinHostPort(sb.PodIP, strconv.Itoa(wire.PodAgentPort))
	opts := append(channel.DialOptions(), grpc.WithTransportCredentials(credentials.NewTLS(tc)), grpc.WithConnectParams(agentBackoff))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return fmt.Errorf("agent channel: %w", err)
	}
	info, err := pb.NewAgentClient(conn).Info(ctx, &pb.InfoRequest{}, grpc.WaitForReady(true))
	if err == nil && info.GetSandboxId() != sb.ID {
		err = fmt.Errorf("the agent at %s says it is %q", addr, info.GetSandboxId())
	}
	if err != nil {
		conn.Close()
		return fmt.Errorf("sandbox %s: its agent at %s did not answer as it over mutual TLS: %v: %w", sb.ID, addr, err, errdefs.ErrUnavailable)
	}
	sb.AgentConn = conn
	c.log.Info("sandbox pod ready", "sandbox", sb.ID, "node", sb.Node, "pod_ip", sb.PodIP)
	return nil
}

// agentBackoff paces the channel's dials. The pod is Ready once its agent's process has
// started, a moment before the agent listens: the first dial is often refused, and
// gRPC's default backoff (a second, then more) would be most of a start. The agent is on
// the pod network, so a refused dial costs little.
var agentBackoff = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// Pod-level reasons that no wait will cure.
var stuck = map[string]bool{
	"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true, "StartError": true,
}

func condition(sb *sbv1.Sandbox, t sbv1.ConditionType) *metav1.Condition {
	for i := range sb.Status.Conditions {
		if sb.Status.Conditions[i].Type == string(t) {
			return &sb.Status.Conditions[i]
		}
	}
	return nil
}

// podTrouble says what holds pod back, and whether it is past waiting for.
func podTrouble(pod *corev1.Pod) (string, bool) {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return story(pod), true
	}
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			return w.Reason + ": " + w.Message, stuck[w.Reason]
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return story(pod), true
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return "not scheduled: " + cond.Reason + ": " + cond.Message, false
		}
	}
	return "", false
}

// podStory is what the pod of sandbox id says of its end, as the informer last saw it.
func (c *Cluster) podStory(id string) string {
	pod, _ := c.track().pod(id)
	if pod == nil {
		return "the pod is gone"
	}
	return story(pod)
}

// story is what pod says of its end: its phase, why it was deleted or evicted, the
// kubelet's reason and the agent's last words (the termination message, which falls back
// to the log's tail).
func story(pod *corev1.Pod) string {
	s := string(pod.Status.Phase)
	if pod.DeletionTimestamp != nil {
		s = "deleted while " + s // by hand, a drain, an eviction or the node's loss
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
			s += " (" + cond.Reason + ": " + cond.Message + ")"
		}
	}
	if pod.Status.Reason != "" {
		s += " (" + pod.Status.Reason + ": " + pod.Status.Message + ")"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			s += fmt.Sprintf("; the agent exited %d (%s)", t.ExitCode, t.Reason)
			if msg := strings.TrimSpace(t.Message); msg != "" {
				s += ": " + errdefs.Clip(msg, 512)
			}
		}
	}
	return s
}

// Remove deletes sandbox id and everything of it (its pod, Secret and workspace volume),
// and waits until the Sandbox is gone.
func (c *Cluster) Remove(ctx context.Context, id string) error {
	if err := c.removeClaimed(ctx, id); err != nil {
		return err
	}
	fg := metav1.DeletePropagationForeground
	err := c.sbx.Delete(ctx, id, metav1.DeleteOptions{PropagationPolicy: &fg})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.apiError("delete sandbox "+id, err)
	}
	serr := c.core.Secrets(c.cfg.Namespace).Delete(ctx, SecretName(id), metav1.DeleteOptions{})
	if serr != nil && !apierrors.IsNotFound(serr) {
		return c.apiError("delete the channel's Secret of "+id, serr)
	}
	return c.waitGone(ctx, id)
}

// Suspend sets sandbox id Suspended (its pod goes, its workspace volume stays) and waits
// until the pod is gone.
func (c *Cluster) Suspend(ctx context.Context, id string) error {
	gen, err := c.suspend(ctx, id)
	if err != nil {
		return err
	}
	if gen == 0 {
		return c.apiError("sandbox "+id, apierrors.NewNotFound(sbv1.Resource("sandboxes"), id))
	}
	return c.waitSuspended(ctx, id, gen)
}

// suspend sets sandbox id Suspended, without waiting, and returns the Sandbox's
// generation after the write (0 when there is no Sandbox).
func (c *Cluster) suspend(ctx context.Context, id string) (int64, error) {
	patch := fmt.Sprintf(`{"spec":{"operatingMode":%q}}`, sbv1.SandboxOperatingModeSuspended)
	sb, err := c.sbx.Patch(ctx, id, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: ManagedBy})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, c.apiError("suspend sandbox "+id, err)
	}
	return sb.Generation, nil
}

// Namespace is where the cluster's sandboxes live.
func (c *Cluster) Namespace() string { return c.cfg.Namespace }

// Leftovers lists what paddock made in the namespace that is still there: Sandboxes, pods,
// Secrets and volume claims, as kind/name.
func (c *Cluster) Leftovers(ctx context.Context) ([]string, error) {
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy}
	var out []string
	sbs, err := c.sbx.List(ctx, sel)
	if err != nil {
		return nil, c.apiError("list sandboxes", err)
	}
	for _, o := range sbs.Items {
		out = append(out, "Sandbox/"+o.Name)
	}
	pods, err := c.core.Pods(c.cfg.Namespace).List(ctx, sel)
	if err != nil {
		return nil, c.apiError("list pods", err)
	}
	for _, o := range pods.Items {
		out = append(out, "Pod/"+o.Name)
	}
	secrets, err := c.core.Secrets(c.cfg.Namespace).List(ctx, sel)
	if err != nil {
		return nil, c.apiError("list secrets", err)
	}
	for _, o := range secrets.Items {
		out = append(out, "Secret/"+o.Name)
	}
	pvcs, err := c.core.PersistentVolumeClaims(c.cfg.Namespace).List(ctx, sel)
	if err != nil {
		return nil, c.apiError("list volume claims", err)
	}
	for _, o := range pvcs.Items {
		out = append(out, "PersistentVolumeClaim/"+o.Name)
	}
	return out, nil
}
