package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/paddockhq/paddock/internal/wire/podtls"
)

// renew keeps the agent's certificate current while the sandbox runs: at half the life of
// the one it holds, it issues a new one for the same sandbox and writes it into the
// sandbox's Secret, which the kubelet rewrites in the pod, where the agent presents it from
// its next connection on. A failed write (the API server away) is tried again until the
// current certificate expires and after. It returns when ctx ends or the sandbox is lost.
func (s *Sandbox) renew(ctx context.Context) {
	defer close(s.renewing)
	life := s.c.ca.Lifetime
	retry := max(min(life/20, 30*time.Second), time.Second)
	for {
		notAfter, err := podtls.NotAfter(s.pair)
		if err != nil {
			s.c.log.Error("the channel certificate cannot be read: not renewed", "sandbox", s.ID, "err", err)
			return
		}
		wait := time.Until(podtls.RenewAt(notAfter, life))
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.AgentExited:
				return
			case <-time.After(wait):
			}
			pair, err := s.c.renewSecret(ctx, s.ID)
			if err == nil {
				s.pair = pair
				break
			}
			if ctx.Err() != nil {
				return
			}
			s.c.log.Warn("renew the channel certificate", "sandbox", s.ID, "expires", notAfter, "err", err)
			wait = retry
		}
	}
}

// renewSecret issues sandbox id a new certificate and writes it, with its key, into the
// sandbox's Secret.
func (c *Cluster) renewSecret(ctx context.Context, id string) (podtls.Pair, error) {
	pair, err := c.ca.IssueSandbox(id)
	if err != nil {
		return podtls.Pair{}, err
	}
	// The merge patch holds the key: it goes to the API server only.
	patch, err := json.Marshal(map[string]any{"data": map[string][]byte{podtls.CertFile: pair.Cert, podtls.KeyFile: pair.Key}})
	if err != nil {
		return podtls.Pair{}, err
	}
	if _, err := c.core.Secrets(c.cfg.Namespace).Patch(ctx, SecretName(id), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy}); err != nil {
		return podtls.Pair{}, c.apiError(fmt.Sprintf("renew the channel certificate of sandbox %s", id), err)
	}
	notAfter, _ := podtls.NotAfter(pair)
	c.log.Info("channel certificate renewed", "sandbox", id, "valid_until", notAfter.UTC().Format(time.RFC3339))
	return pair, nil
}
