package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	sbv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned/typed/api/v1beta1"
	xv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/sandbox/kubespec"
	"github.com/paddockhq/paddock/internal/wire"
)

// Warm pool. A pool is agent-sandbox's own: a SandboxTemplate of paddock's pod for the
// runner's default runtime and limits, whose agent starts with no sandbox
// (wire.PodWarmFlag), and a SandboxWarmPool of it that the controller keeps full. A
// create that matches the template makes a SandboxClaim; the controller hands it one
// ready member, which no other claim can get (it moves the member's ownership to the
// claim). paddock then makes that pod the sandbox:
//
//  1. it dials the pod's IP with its control-plane certificate (the warm agent serves
//     nobody else) and asks who it is; the agent answers with its pod's service account
//     token (audience wire.PodTokenAudience, bound by the kubelet to that pod);
//  2. a TokenReview says which pod the token is bound to: it must be the claimed member's
//     pod, by name and UID, in the sandboxes' namespace. Another pod, or one that took
//     over the member's IP, has no such token;
//  3. over a connection pinned to the certificate that answered step 1, paddock sends the
//     envelope and a key and certificate issued for the new sandbox ID, once: the agent
//     then serves that sandbox exactly as a cold pod does, and paddock dials it as any.
//
// A member that died while idle is never handed out: the controller may still offer an
// unready one, but its claim then fails step 1 or 2, and paddock deletes the claim (with
// the member) and starts the sandbox cold. Only new sandboxes that are not persistent
// come from the pool: a persistent one's pod and volume are its own for stop and start.

// PoolName names the SandboxTemplate and the SandboxWarmPool paddock makes.
const PoolName = "paddock-warm"

// LabelPool marks the warm pool's objects and pods.
const LabelPool = "paddock.dev/pool"

// poolCASecret holds only the CA's certificate, for the warm pods.
const poolCASecret = PoolName + "-ca"

// pool holds the cluster's warm pools, when runner.warm_pool sets any: the default
// runtime and limits' (PoolName), and one per runner.warm_pool.pools entry
// (WarmPoolName of its key).
type pool struct {
	ext   extv1.ExtensionsV1beta1Interface
	authn authnclient.AuthenticationV1Interface

	mu       sync.Mutex
	defaults wire.Limits                 // the limits a pool's left-out limits were filled from
	made     bool                        // the pools' objects are there, as paddock wrote them
	byKey    map[kubespec.PoolKey]string // each pool's name, by the key it serves

	size   prometheus.Collector
	claims *prometheus.CounterVec
}

func (c *Cluster) openPool(rc *rest.Config) error {
	ext, err := extv1.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("agent-sandbox extensions client: %w", err)
	}
	authn, err := authnclient.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	p := &pool{ext: ext, authn: authn}
	p.claims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paddock_kube_pool_claims_total", Help: "New cluster sandboxes by the warm pool whose runtime and limits they have, and result: hit (a claimed pool pod) or miss (started cold); template none is a sandbox no pool matches.",
	}, []string{"template", "result"})
	if c.cfg.WarmPool.Size > 0 {
		p.claims.WithLabelValues(PoolName, "hit")
		p.claims.WithLabelValues(PoolName, "miss")
	}
	p.size = &poolSizes{c: c, desc: prometheus.NewDesc("paddock_kube_pool_size", "Pods each of the cluster's warm pools holds ready to be claimed.", []string{"template"}, nil)}
	c.pool = p
	return nil
}

// poolSizes reports each made pool's ready members.
type poolSizes struct {
	c    *Cluster
	desc *prometheus.Desc
}

func (s *poolSizes) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

func (s *poolSizes) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, name := range s.c.poolNames() {
		n, _ := s.c.poolReady(ctx, name)
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(n), name)
	}
}

// poolNames are the names of the pools made, sorted.
func (c *Cluster) poolNames() []string {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	return slices.Sorted(maps.Values(c.pool.byKey))
}

// Collectors are the pools' metrics: their sizes and their hits and misses.
func (c *Cluster) Collectors() []prometheus.Collector {
	if !c.cfg.WarmPool.Any() {
		return nil
	}
	return []prometheus.Collector{c.pool.size, c.pool.claims}
}

// PoolClaims is how many creates the default pool served (hits) and did not (misses).
func (c *Cluster) PoolClaims() (hits, misses float64) { return c.PoolClaimsOf(PoolName) }

// PoolClaimsOf is PoolClaims of the pool called name; "none" counts the creates no pool
// matched.
func (c *Cluster) PoolClaimsOf(name string) (hits, misses float64) {
	return counterValue(c.pool.claims.WithLabelValues(name, "hit")), counterValue(c.pool.claims.WithLabelValues(name, "miss"))
}

// PoolReady is how many of the default pool's members are ready to be claimed.
func (c *Cluster) PoolReady(ctx context.Context) (int, error) { return c.poolReady(ctx, PoolName) }

// PoolReadyOf is how many of the members of the pool called name are ready.
func (c *Cluster) PoolReadyOf(ctx context.Context, name string) (int, error) {
	return c.poolReady(ctx, name)
}

// poolReady is how many members of the SandboxWarmPool called name are ready.
func (c *Cluster) poolReady(ctx context.Context, name string) (int, error) {
	wp, err := c.pool.ext.SandboxWarmPools(c.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, c.apiError("warm pool "+name, err)
	}
	return int(wp.Status.ReadyReplicas), nil
}

// WarmPoolName names the SandboxTemplate and SandboxWarmPool of a runner.warm_pool.pools
// entry: its runtime and a digest of its limits.
func WarmPoolName(key kubespec.PoolKey) string {
	l := key.Limits
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%g/%d/%d", l.Memory, l.CPUs, l.Disk, l.Tmp))
	return PoolName + "-" + key.Runtime + "-" + hex.EncodeToString(sum[:5])
}

// EnsurePool makes or rewrites the pools' objects, their left-out limits filled from
// defaults (the runner's), and deletes the runner pools paddock made that are no longer
// in its configuration (prunePools).
func (c *Cluster) EnsurePool(ctx context.Context, defaults wire.Limits) error {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.made && p.defaults == defaults {
		return nil
	}
	byKey, err := c.putPools(ctx, defaults)
	if err != nil {
		return err
	}
	if err := c.prunePools(ctx, slices.Collect(maps.Values(byKey)), isRunnerPool); err != nil {
		// The configured pools serve anyway; the next start tries again.
		c.log.Warn("warm pools no longer configured are left on the cluster", "err", err)
	}
	p.byKey, p.defaults, p.made = byKey, defaults, true
	return nil
}

// putPools makes or rewrites each configured pool's objects, and returns their names by key.
func (c *Cluster) putPools(ctx context.Context, defaults wire.Limits) (map[kubespec.PoolKey]string, error) {
	w, p := c.cfg.WarmPool, c.pool
	byKey := map[kubespec.PoolKey]string{}
	if !w.Any() {
		return byKey, nil
	}
	keys, err := w.PoolKeys(defaults)
	if err != nil {
		return nil, err
	}
	if err := c.putPoolSecret(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: poolCASecret, Namespace: c.cfg.Namespace, Labels: poolLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"ca.crt": c.ca.CertPEM()},
	}); err != nil {
		return nil, err
	}
	for i, key := range keys {
		name := WarmPoolName(key)
		if i == 0 && w.Size > 0 {
			name = PoolName
		}
		size := w.PoolSize(key, defaults)
		if err := c.putPoolObjects(ctx, name, size, key); err != nil {
			return nil, err
		}
		byKey[key] = name
		p.claims.WithLabelValues(name, "hit")
		p.claims.WithLabelValues(name, "miss")
		c.log.Info("warm pool ready to fill", "pool", name, "size", size, "runtime", key.Runtime, "namespace", c.cfg.Namespace)
	}
	return byKey, nil
}

func (c *Cluster) putPoolSecret(ctx context.Context, sec *corev1.Secret) error {
	secrets := c.core.Secrets(c.cfg.Namespace)
	_, err := secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: ManagedBy})
	if apierrors.IsAlreadyExists(err) {
		var old *corev1.Secret
		if old, err = secrets.Get(ctx, sec.Name, metav1.GetOptions{}); err == nil {
			if old.Labels[LabelManagedBy] != ManagedBy || old.Labels[LabelPool] != PoolName {
				return fmt.Errorf("the Secret %s/%s exists and is not paddock's: %w", c.cfg.Namespace, sec.Name, errdefs.ErrFailedPrecondition)
			}
			old.Data = sec.Data
			_, err = secrets.Update(ctx, old, metav1.UpdateOptions{FieldManager: ManagedBy})
		}
	}
	if err != nil {
		return c.apiError("the warm pool's Secret", err)
	}
	return nil
}

// RemovePool deletes the pools' objects (their unclaimed members go with them).
func (c *Cluster) RemovePool(ctx context.Context) error {
	p := c.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	names := []string{PoolName}
	for _, n := range p.byKey {
		if n != PoolName {
			names = append(names, n)
		}
	}
	p.made, p.byKey = false, nil
	var errs []error
	for i, n := range names {
		errs = append(errs, c.removePoolObjects(ctx, n, i == len(names)-1))
	}
	return errors.Join(errs...)
}

// removePoolObjects deletes the SandboxWarmPool and SandboxTemplate called name (and the
// pools' CA Secret, with secret), then waits until their unclaimed members are gone.
func (c *Cluster) removePoolObjects(ctx context.Context, name string, secret bool) error {
	p := c.pool
	var errs []error
	bg := metav1.DeletePropagationForeground
	if err := p.ext.SandboxWarmPools(c.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, c.apiError("delete the warm pool "+name, err))
	}
	if err := p.ext.SandboxTemplates(c.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, c.apiError("delete the warm pool's template "+name, err))
	}
	if secret {
		if err := c.core.Secrets(c.cfg.Namespace).Delete(ctx, poolCASecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, c.apiError("delete the warm pool's Secret", err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Wait until the pool and its unclaimed members' pods are gone: a pool made again at
	// once must not find them. Claimed ones are their sandboxes'.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: LabelPool + "=" + name + "," + warmMemberLabel}
	for i := 1; ; i++ {
		pods, err := c.core.Pods(c.cfg.Namespace).List(ctx, sel)
		_, perr := p.ext.SandboxWarmPools(c.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(pods.Items) == 0 && apierrors.IsNotFound(perr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the warm pool %s's pods are still there after %s: %w", name, c.cfg.ReadyTimeout, errdefs.ErrUnavailable)
		case <-time.After(min(50*time.Millisecond*time.Duration(i), 500*time.Millisecond)):
		}
	}
}

// warmMemberLabel is on an unclaimed member (and its pod); a claim takes it off.
const warmMemberLabel = "agents.x-k8s.io/warm-pool-sandbox"

func poolLabels() map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelPool: PoolName}
}

// PoolTemplate is the pool's SandboxTemplate: paddock's pod for a sandbox of limits on the
// default runtime, whose agent waits for a claim, with the CA's certificate and the pod's
// token where the sandbox's Secret would be.
func PoolTemplate(cfg *Config, limits wire.Limits) (*xv1.SandboxTemplate, error) {
	return poolTemplate(cfg, kubespec.KeyOf("", limits))
}

// poolTemplate is PoolTemplate for sandboxes of key's runtime and limits.
func poolTemplate(cfg *Config, key kubespec.PoolKey) (*xv1.SandboxTemplate, error) {
	sb, err := NewSandbox(cfg, Request{ID: PoolName, Runtime: key.Runtime, Limits: key.Limits, UID: cfg.SandboxUID})
	if err != nil {
		return nil, err
	}
	bp := sb.Spec.SandboxBlueprint
	bp.PodTemplate.ObjectMeta = sbv1.PodMetadata{Labels: poolLabels()}
	bp.VolumeClaimTemplates[0].Labels = poolLabels()
	spec := &bp.PodTemplate.Spec
	spec.Containers[0].Command = []string{wire.AgentPath, wire.PodWarmFlag, wire.PodDir}
	mode, expiry := int32(0o400), int64(3600)
	for i := range spec.Volumes {
		if spec.Volumes[i].Name != secretVolume {
			continue
		}
		spec.Volumes[i].VolumeSource = corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: &mode,
			Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: poolCASecret}}},
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: wire.PodTokenAudience, ExpirationSeconds: &expiry, Path: wire.PodTokenFile}},
			},
		}}
	}
	return &xv1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: PoolName, Namespace: cfg.Namespace, Labels: poolLabels()},
		Spec: xv1.SandboxTemplateSpec{
			SandboxBlueprint: bp,
			// paddock ships its own NetworkPolicy (deploy/kubernetes/networkpolicy.yaml).
			NetworkPolicyManagement: xv1.NetworkPolicyManagementUnmanaged,
		},
	}, nil
}

// errNoClaim says a create does not come from the pool; the caller starts it cold.
var errNoClaim = errors.New("not from the warm pool")

// poolFor is the name of the pool whose runtime and limits are req's, if one is made. The
// pools' pods are made for the sandbox user (the pod firewall names it): a sandbox of
// another user takes none.
func (c *Cluster) poolFor(req Request) (string, bool) {
	if req.UID != c.cfg.SandboxUID {
		return "", false
	}
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	name, ok := c.pool.byKey[kubespec.KeyOf(req.Runtime, req.Limits)]
	return name, ok
}

// StartWarm starts sandbox req from the warm pool when it can (a hit), else cold (a
// miss). A sandbox that exists already (a stopped persistent one) is started again as
// Start does, on the member it claimed if it came from the pool.
func (c *Cluster) StartWarm(ctx context.Context, req Request, persistent bool) (sb *Sandbox, hit bool, err error) {
	// A claim of its own, from when a pool was configured; a cluster without the
	// extensions, or a Role without claims, has none.
	if cl, err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Get(ctx, req.ID, metav1.GetOptions{}); err == nil {
		sb, err := c.resumeClaimed(ctx, req, cl)
		return sb, false, err
	} else if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return nil, false, c.apiError("claim "+req.ID, err)
	}
	if _, err := c.sbx.Get(ctx, req.ID, metav1.GetOptions{}); err == nil {
		sb, err := c.Start(ctx, req, persistent)
		return sb, false, err
	}
	name, ok := c.poolFor(req)
	if ok {
		sb, err = c.claimFrom(ctx, name, req, persistent)
		if err == nil {
			c.pool.claims.WithLabelValues(name, "hit").Inc()
			return sb, true, nil
		}
		if !errors.Is(err, errNoClaim) {
			c.log.Warn("warm claim failed; starting cold", "sandbox", req.ID, "pool", name, "err", err)
		}
	}
	if c.cfg.WarmPool.Any() {
		if !ok {
			name = "none"
		}
		c.pool.claims.WithLabelValues(name, "miss").Inc()
	}
	sb, err = c.Start(ctx, req, persistent)
	return sb, false, err
}

// claimFrom makes a SandboxClaim for req of the SandboxWarmPool called pool and makes the
// member it gets sandbox req; a claim of any pool but the default one is labelled with
// its pool's name, and a template pool's member with this replica's ID.
func (c *Cluster) claimFrom(ctx context.Context, pool string, req Request, persistent bool) (*Sandbox, error) {
	if n, err := c.poolReady(ctx, pool); err != nil || n == 0 {
		return nil, errNoClaim
	}
	claims := c.pool.ext.SandboxClaims(c.cfg.Namespace)
	lbl := labels(req.ID)
	if pool != PoolName {
		lbl[LabelPool] = pool
	}
	if !isRunnerPool(pool) && c.cfg.Replica != "" {
		lbl[LabelReplica] = c.cfg.Replica
	}
	cl := &xv1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: req.ID, Namespace: c.cfg.Namespace, Labels: lbl},
		Spec:       xv1.SandboxClaimSpec{WarmPoolRef: xv1.SandboxWarmPoolRef{Name: pool}},
	}
	if _, err := claims.Create(ctx, cl, metav1.CreateOptions{FieldManager: ManagedBy}); err != nil {
		return nil, c.apiError("claim sandbox "+req.ID, err)
	}
	sb, err := c.takeClaim(ctx, req, persistent)
	if err != nil {
		if rerr := c.removeClaim(context.WithoutCancel(ctx), req.ID); rerr != nil {
			c.log.Warn("remove a failed claim", "sandbox", req.ID, "err", rerr)
		}
		return nil, err
	}
	return sb, nil
}

// claimWait bounds a claim's wait for a member: a ready member comes in well under a
// second; past this the controller is making a cold one, which paddock's own cold start
// does as well.
const claimWait = 15 * time.Second

func (c *Cluster) takeClaim(ctx context.Context, req Request, persistent bool) (*Sandbox, error) {
	wctx, cancel := context.WithTimeout(ctx, claimWait)
	defer cancel()
	member, err := c.waitClaim(wctx, req.ID)
	if err != nil {
		return nil, err
	}
	if member.Labels[sbv1.SandboxLaunchTypeLabel] != sbv1.SandboxLaunchTypeWarm {
		return nil, fmt.Errorf("claim %s: the controller made a cold Sandbox, not a pool member: %w", req.ID, errNoClaim)
	}
	if err := c.handOver(wctx, req, member); err != nil {
		return nil, err
	}
	member, err = c.markMember(ctx, member, req.ID)
	if err != nil {
		return nil, err
	}
	want := member.DeepCopy()
	sb := &Sandbox{c: c, ID: req.ID, name: member.Name, claimed: true, persistent: persistent, want: want, Agent: sandbox.Agent{AgentExited: make(chan struct{})},
		template: specHash(member.Spec.PodTemplate)}
	if err := c.connect(ctx, sb, 0, true); err != nil {
		sb.persistent = false // a claim that did not start is deleted, not kept
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			c.log.Warn("clean up after a failed claim", "sandbox", req.ID, "err", derr)
		}
		return nil, err
	}
	// A claimed pod holds its pair in memory, with no Secret to renew it through: it lasts
	// cert_lifetime. A connection made after that fails, the sandbox is marked lost, and
	// its next start (resumeClaimed) mounts a Secret, which is renewed.
	sb.follow(false)
	return sb, nil
}

// waitClaim waits until claim id names its member and the member is ready with an address.
func (c *Cluster) waitClaim(ctx context.Context, id string) (*sbv1.Sandbox, error) {
	for i := 1; ; i++ {
		cl, err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
		if err != nil && ctx.Err() == nil {
			return nil, c.apiError("claim "+id, err)
		}
		if err == nil && cl.Status.SandboxStatus.Name != "" {
			sb, err := c.sbx.Get(ctx, cl.Status.SandboxStatus.Name, metav1.GetOptions{})
			if err != nil && ctx.Err() == nil {
				return nil, c.apiError("claim "+id, err)
			}
			if err == nil {
				if isTrue(sb, sbv1.SandboxConditionFinished) {
					return nil, fmt.Errorf("claim %s: its member %s has ended", id, sb.Name)
				}
				if isTrue(sb, sbv1.SandboxConditionReady) && len(sb.Status.PodIPs) > 0 {
					return sb, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("claim %s: no ready member within %s: %w", id, claimWait, errNoClaim)
		case <-time.After(min(5*time.Millisecond*time.Duration(1+i/20), 100*time.Millisecond)):
		}
	}
}

// handOver makes member's pod sandbox req: it checks, by the token the pod shows, that the
// pod answering at the member's address is the member's, then sends it the sandbox's
// envelope and key over the same pinned connection.
func (c *Cluster) handOver(ctx context.Context, req Request, member *sbv1.Sandbox) error {
	podName := member.Name
	if n := member.Annotations[sbv1.SandboxPodNameAnnotation]; n != "" {
		podName = n
	}
	pod, err := c.core.Pods(c.cfg.Namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return c.apiError("the pod of pool member "+member.Name, err)
	}
	base := "https://" + net.JoinHostPort(member.Status.PodIPs[0], strconv.Itoa(wire.PodAgentPort))
	var seen []byte
	tc, err := c.ca.WarmClientConfig(c.cp.Certificate, nil, &seen)
	if err != nil {
		return err
	}
	token, err := warmCall(ctx, tc, http.MethodGet, base+wire.WarmIdentityPath, nil)
	if err != nil {
		return fmt.Errorf("pool member %s: who are you: %w", member.Name, err)
	}
	if err := c.verifyPodToken(ctx, token, pod); err != nil {
		return fmt.Errorf("pool member %s: %w", member.Name, err)
	}
	pair, err := c.ca.IssueSandbox(req.ID)
	if err != nil {
		return err
	}
	var env bytes.Buffer
	if err := wire.WriteEnvelope(&env, Envelope(req)); err != nil {
		return err
	}
	body, err := json.Marshal(wire.WarmClaim{Envelope: env.Bytes(), Cert: pair.Cert, Key: pair.Key, CA: c.ca.CertPEM()})
	if err != nil {
		return err
	}
	pinned, err := c.ca.WarmClientConfig(c.cp.Certificate, seen, nil)
	if err != nil {
		return err
	}
	if _, err := warmCall(ctx, pinned, http.MethodPost, base+wire.WarmClaimPath, body); err != nil {
		return fmt.Errorf("pool member %s: claim: %w", member.Name, err)
	}
	return nil
}

// verifyPodToken asks the API server whom token is bound to: it must be pod, in the
// sandboxes' namespace, for paddock's audience.
func (c *Cluster) verifyPodToken(ctx context.Context, token []byte, pod *corev1.Pod) error {
	tr, err := c.pool.authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{
		Token: string(token), Audiences: []string{wire.PodTokenAudience},
	}}, metav1.CreateOptions{})
	if err != nil {
		return c.apiError("review the pod's token", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return fmt.Errorf("its token is not valid: %s: %w", errdefs.Clip(st.Error, 200), errdefs.ErrPermissionDenied)
	}
	names, uids := st.User.Extra["authentication.kubernetes.io/pod-name"], st.User.Extra["authentication.kubernetes.io/pod-uid"]
	if !strings.HasPrefix(st.User.Username, "system:serviceaccount:"+c.cfg.Namespace+":") ||
		len(names) != 1 || names[0] != pod.Name || len(uids) != 1 || uids[0] != string(pod.UID) {
		return fmt.Errorf("the pod that answered is not the member's (its token is %s's, pod %v): %w", st.User.Username, names, errdefs.ErrPermissionDenied)
	}
	return nil
}

// warmCall makes one request of the handshake over a connection of its own.
func warmCall(ctx context.Context, tc *tls.Config, method, url string, body []byte) ([]byte, error) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true, ForceAttemptHTTP2: false}}
	defer hc.CloseIdleConnections()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s: %s", resp.Status, errdefs.Clip(string(b), 200))
	}
	return b, nil
}

// removeClaim deletes claim id, its member with it, and waits until the member is gone.
func (c *Cluster) removeClaim(ctx context.Context, id string) error {
	fg := metav1.DeletePropagationForeground
	err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Delete(ctx, id, metav1.DeleteOptions{PropagationPolicy: &fg})
	if err != nil && !apierrors.IsNotFound(err) {
		return c.apiError("delete claim "+id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	for i := 1; ; i++ {
		_, err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("claim %s is still there after %s: %w", id, c.cfg.ReadyTimeout, errdefs.ErrUnavailable)
		case <-time.After(min(50*time.Millisecond*time.Duration(i), 500*time.Millisecond)):
		}
	}
}

// specHash is a digest of a pod template's spec: a claimed member's labels are the
// controller's to change, its pod spec is not.
func specHash(pt sbv1.PodTemplate) string {
	return templateHash(sbv1.PodTemplate{Spec: pt.Spec})
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// WarmIdentity asks the warm agent at ip for its pod's token, as a claim's first step does.
func (c *Cluster) WarmIdentity(ctx context.Context, ip string) ([]byte, error) {
	tc, err := c.ca.WarmClientConfig(c.cp.Certificate, nil, nil)
	if err != nil {
		return nil, err
	}
	return warmCall(ctx, tc, http.MethodGet, "https://"+net.JoinHostPort(ip, strconv.Itoa(wire.PodAgentPort))+wire.WarmIdentityPath, nil)
}

// VerifyMember is a claim's second step: token must be bound to pod.
func (c *Cluster) VerifyMember(ctx context.Context, token []byte, pod *corev1.Pod) error {
	return c.verifyPodToken(ctx, token, pod)
}

// resumeClaimed starts again a persistent sandbox that came from the pool: its member,
// suspended, keeps the volume; paddock writes its own pod for req over the member's
// (an agent that reads the sandbox's Secret, as a cold start's) and sets it Running.
func (c *Cluster) resumeClaimed(ctx context.Context, req Request, cl *xv1.SandboxClaim) (*Sandbox, error) {
	if cl.Labels[LabelManagedBy] != ManagedBy || cl.Labels[LabelSandbox] != req.ID {
		return nil, fmt.Errorf("the SandboxClaim %s/%s exists and paddock did not make it: %w", c.cfg.Namespace, cl.Name, errdefs.ErrFailedPrecondition)
	}
	name := cl.Status.SandboxStatus.Name
	if name == "" {
		return nil, fmt.Errorf("sandbox %s: its claim names no member: %w", req.ID, errdefs.ErrUnavailable)
	}
	member, err := c.sbx.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, c.apiError("the member of sandbox "+req.ID, err)
	}
	if member, err = c.markMember(ctx, member, req.ID); err != nil {
		return nil, err
	}
	if ref := metav1.GetControllerOf(member); ref == nil || ref.Kind != "SandboxClaim" || ref.UID != cl.UID {
		return nil, fmt.Errorf("the Sandbox %s/%s is not sandbox %s's claimed member: %w", c.cfg.Namespace, name, req.ID, errdefs.ErrFailedPrecondition)
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
	secret.OwnerReferences = []metav1.OwnerReference{{APIVersion: sbv1.GroupVersion.String(), Kind: sbv1.SandboxKind, Name: member.Name, UID: member.UID}}
	if err := c.putSecret(ctx, secret); err != nil {
		return nil, err
	}
	var made *sbv1.Sandbox
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		made, err = c.update(ctx, member, want, sbv1.SandboxOperatingModeRunning)
		if apierrors.IsConflict(err) {
			if fresh, gerr := c.sbx.Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				member = fresh
			}
		}
		return err
	})
	if err != nil {
		return nil, c.apiError("resume sandbox "+req.ID, err)
	}
	want = made.DeepCopy()
	sb := &Sandbox{c: c, ID: req.ID, name: name, claimed: true, persistent: true, want: want, Agent: sandbox.Agent{AgentExited: make(chan struct{})},
		template: specHash(made.Spec.PodTemplate)}
	if err := c.connect(ctx, sb, made.Generation, true); err != nil {
		if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
			c.log.Warn("clean up after a failed start", "sandbox", req.ID, "err", derr)
		}
		return nil, err
	}
	sb.pair = pair
	sb.follow(true)
	return sb, nil
}

// markMember labels a claimed member's Sandbox as paddock's sandbox id, so that the shared
// informer (which follows paddock's label alone) follows it.
func (c *Cluster) markMember(ctx context.Context, member *sbv1.Sandbox, id string) (*sbv1.Sandbox, error) {
	if member.Labels[LabelManagedBy] == ManagedBy && member.Labels[LabelSandbox] == id {
		return member, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{LabelManagedBy: ManagedBy, LabelSandbox: id}}})
	if err != nil {
		return nil, err
	}
	marked, err := c.sbx.Patch(ctx, member.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy})
	if err != nil {
		return nil, c.apiError("label the member of sandbox "+id, err)
	}
	return marked, nil
}

// removeClaimed deletes sandbox id's claim, and with it its member, when it came from the
// pool; a cluster without the extensions (or a Role without claims) has none to delete.
func (c *Cluster) removeClaimed(ctx context.Context, id string) error {
	_, err := c.pool.ext.SandboxClaims(c.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return nil
	case err != nil:
		return c.apiError("claim "+id, err)
	}
	return c.removeClaim(ctx, id)
}
