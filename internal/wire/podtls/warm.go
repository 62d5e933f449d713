package podtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"
)

// A warm pod (one a pool started before anyone asked for it) has no sandbox yet, so no
// certificate of the CA's. Its agent serves the claim handshake with a key it made at
// start and never wrote down, under a self-signed certificate; the control plane learns
// which pod it reached from the pod's own Kubernetes credential (a service account token
// bound to that pod), asked for over this connection, and then pins this certificate for
// the claim itself. The agent still serves only the control plane's client certificate.

// warmValidity is how long a warm agent's self-signed certificate lasts: a pool member
// may wait long before its claim, and the control plane pins the certificate it met.
const warmValidity = 365 * 24 * time.Hour

// WarmServerConfig is a warm agent's side of the claim handshake: a fresh key under a
// self-signed certificate, serving only a client whose certificate is the CA's (caPEM)
// and names the control plane.
func WarmServerConfig(caPEM []byte) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "paddock warm agent"},
		NotBefore: now.Add(-skew), NotAfter: now.Add(warmValidity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, err := parseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != ControlPlaneName {
				return errors.New("podtls: the client is not the control plane")
			}
			return nil
		},
	}, nil
}

// WarmClientConfig is the control plane's side of the claim handshake. The server's
// certificate is not the CA's (the pod has none yet): with pinned nil it accepts any one
// and records it in *seen; with pinned set it accepts only that certificate, so that the
// claim goes to the same key that proved which pod it is.
func (ca *CA) WarmClientConfig(client func() (*tls.Certificate, error), pinned []byte, seen *[]byte) (*tls.Config, error) {
	if client == nil {
		return nil, errors.New("podtls: no control plane certificate")
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return client() },
		// The chain is not the CA's by design; the pin (or the pod's token) stands in.
		InsecureSkipVerify: true, //nolint:gosec // see above: identity comes from the pod's token and the pin
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("podtls: the warm agent showed no certificate")
			}
			if pinned != nil && !bytes.Equal(raw[0], pinned) {
				return errors.New("podtls: the warm agent's certificate is not the one that proved its pod")
			}
			if seen != nil {
				*seen = bytes.Clone(raw[0])
			}
			return nil
		},
	}, nil
}

// Leaf parses a PEM certificate.
func Leaf(certPEM []byte) (*x509.Certificate, error) { return parseCert(certPEM) }
