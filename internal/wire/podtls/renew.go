package podtls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
	"time"
)

// RenewAt is when a certificate valid until notAfter, issued with lifetime, is renewed:
// at half its life, so that a renewal that fails has the other half to be tried again,
// and a pod has time to see its new Secret (the kubelet rewrites a mounted Secret at its
// pod's next sync, a minute or so by default).
func RenewAt(notAfter time.Time, lifetime time.Duration) time.Time {
	return notAfter.Add(-lifetime / 2)
}

// NotAfter is the end of the validity of the certificate in p.
func NotAfter(p Pair) (time.Time, error) {
	c, err := parseCert(p.Cert)
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}

// Renewer holds the control plane's client certificate and issues a new one when the
// current one is half through its life.
type Renewer struct {
	ca *CA
	mu sync.Mutex
	// cert is the current certificate, renewAt when to issue the next.
	cert    *tls.Certificate
	renewAt time.Time
}

// NewRenewer issues the control plane's first certificate.
func (ca *CA) NewRenewer() (*Renewer, error) {
	r := &Renewer{ca: ca}
	if _, err := r.Certificate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Certificate is the current client certificate, renewed when due. A renewal that fails
// keeps the current one while it is valid.
func (r *Renewer) Certificate() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && time.Now().Before(r.renewAt) {
		return r.cert, nil
	}
	p, err := r.ca.IssueControlPlane()
	if err == nil {
		var c tls.Certificate
		if c, err = tls.X509KeyPair(p.Cert, p.Key); err == nil {
			r.cert, r.renewAt = &c, RenewAt(c.Leaf.NotAfter, r.ca.lifetime())
			return r.cert, nil
		}
	}
	if r.cert != nil && time.Now().Before(r.cert.Leaf.NotAfter) {
		return r.cert, nil
	}
	return nil, fmt.Errorf("control plane certificate: %w", err)
}

func (ca *CA) lifetime() time.Duration {
	if ca.Lifetime <= 0 {
		return DefaultLifetime
	}
	return ca.Lifetime
}

// ServerConfigReloading is ServerConfig with the agent's pair read by load at each
// handshake, so that a pair renewed while the agent runs (its Secret rewritten) is
// presented from the next connection on. A pair that does not load (read half-way through
// a rewrite) leaves the last good one in use; reloaded, when set, is told of each new one.
func ServerConfigReloading(load func() (Pair, error), caPEM []byte, reloaded func(notAfter time.Time)) (*tls.Config, error) {
	first, err := load()
	if err != nil {
		return nil, fmt.Errorf("sandbox certificate: %w", err)
	}
	cur, err := tls.X509KeyPair(first.Cert, first.Key)
	if err != nil {
		return nil, fmt.Errorf("sandbox certificate: %w", err)
	}
	cfg, err := serverConfig(caPEM)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	curPEM := first.Cert
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		p, err := load()
		if err != nil || bytes.Equal(p.Cert, curPEM) {
			return &cur, nil
		}
		next, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil || !newer(next.Leaf, cur.Leaf) {
			return &cur, nil
		}
		cur, curPEM = next, p.Cert
		if reloaded != nil {
			reloaded(next.Leaf.NotAfter)
		}
		return &cur, nil
	}
	return cfg, nil
}

// newer reports whether next may replace cur: the same name, valid for longer.
func newer(next, cur *x509.Certificate) bool {
	if next == nil || cur == nil || len(next.DNSNames) != 1 || len(cur.DNSNames) != 1 {
		return false
	}
	return next.DNSNames[0] == cur.DNSNames[0] && next.NotAfter.After(cur.NotAfter)
}
