// Package podtls is the mutual TLS of the agent's channel when the agent runs in a pod on a
// cluster, where the channel is a TCP connection over the pod network rather than a
// descriptor only the agent holds.
//
// The control plane holds a CA. For each sandbox it issues a key and a server
// certificate naming that sandbox alone (DNS name ServerName(id)), delivered in a Secret
// only that sandbox's pod mounts; it keeps a client certificate of its own
// (ControlPlaneName). The control plane dials a pod's IP and accepts the connection only if
// the certificate it is shown is the CA's and names the sandbox it meant to reach; the agent
// accepts only a client certificate of the CA's that names the control plane.
//
// Threat model: the pod network is hostile. Any pod may dial any agent, answer on an IP it
// took over, or hold another sandbox's IP after a restart. A pod holding sandbox A's Secret
// cannot answer as sandbox B (the name is checked), and cannot call another agent (its
// certificate is for servers only, and is not the control plane's). Nothing rests on
// addresses.
package podtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// ControlPlaneName is the common name of the control plane's client certificate: the only
// client an agent serves.
const ControlPlaneName = "paddock-control-plane"

// nameSuffix makes a sandbox ID a DNS name no real host has.
const nameSuffix = ".sandbox.paddock.internal"

// ServerName is the DNS name a sandbox's certificate holds, and what the control plane
// expects when it dials that sandbox.
func ServerName(id string) string { return id + nameSuffix }

// Files in the Secret (and the directory the pod mounts it at) that the agent reads.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// DefaultLifetime is how long the certificates a CA issues last when its Lifetime is zero.
const DefaultLifetime = 24 * time.Hour

// Validity of what the CA issues.
const (
	caValidity = 10 * 365 * 24 * time.Hour
	// skew backdates certificates, for clocks a little apart between nodes.
	skew = 5 * time.Minute
)

// CA issues the channel's certificates.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
	// Lifetime is how long the sandbox and control plane certificates it issues last
	// (DefaultLifetime when zero); they are renewed while they run (see Renewer).
	Lifetime time.Duration
}

// NewCA makes a fresh CA.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "paddock sandbox channel CA"},
		NotBefore:             time.Now().Add(-skew),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, pem: pemBlock("CERTIFICATE", der)}, nil
}

// ParseCA reads a CA from its PEM certificate and PKCS #8 key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate: not a CA: %w", errdefs.ErrInvalidArgument)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return &CA{cert: cert, key: key, pem: certPEM}, nil
}

// String keeps the key out of anything that prints a CA.
func (*CA) String() string { return "podtls.CA{…}" }

// GoString keeps the key out of %#v.
func (*CA) GoString() string { return "podtls.CA{…}" }

// LogValue keeps the key out of logs.
func (*CA) LogValue() slog.Value { return slog.StringValue("podtls.CA{…}") }

// CertPEM is the CA's certificate.
func (ca *CA) CertPEM() []byte { return ca.pem }

// KeyPEM is the CA's key, PKCS #8. It is the control plane's alone.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// Pair is a certificate and its key, PEM.
type Pair struct {
	Cert, Key []byte
}

// String keeps the key out of anything that prints a Pair.
func (Pair) String() string { return "podtls.Pair{…}" }

// LogValue keeps the key out of logs.
func (Pair) LogValue() slog.Value { return slog.StringValue("podtls.Pair{…}") }

// IssueSandbox issues sandbox id's server certificate.
func (ca *CA) IssueSandbox(id string) (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		DNSNames:    []string{ServerName(id)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// IssueControlPlane issues the control plane's client certificate.
func (ca *CA) IssueControlPlane() (Pair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: ControlPlaneName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl.SerialNumber = serial()
	life := ca.Lifetime
	if life <= 0 {
		life = DefaultLifetime
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-skew), now.Add(life)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: pemBlock("CERTIFICATE", der), Key: pemBlock("PRIVATE KEY", kder)}, nil
}

// ClientConfig is the control plane's side of a connection to sandbox id: it presents
// client, and accepts only a certificate of the CA's for that sandbox's name.
func (ca *CA) ClientConfig(client Pair, id string) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(client.Cert, client.Key)
	if err != nil {
		return nil, fmt.Errorf("control plane certificate: %w", err)
	}
	cfg := ca.ClientConfigFunc(nil, id)
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}

// ClientConfigFunc is ClientConfig with the client certificate from get at each
// handshake (a Renewer's Certificate), so that a reconnection presents a current one.
func (ca *CA) ClientConfigFunc(get func() (*tls.Certificate, error), id string) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    roots,
		// The standard verification checks the chain, the server EKU, the validity
		// period and this name.
		ServerName: ServerName(id),
	}
	if get != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get() }
	}
	return cfg
}

// ServerConfig is the agent's side: it presents its own pair and serves only a client
// whose certificate is the CA's and names the control plane.
func ServerConfig(own Pair, caPEM []byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(own.Cert, own.Key)
	if err != nil {
		return nil, fmt.Errorf("sandbox certificate: %w", err)
	}
	cfg, err := serverConfig(caPEM)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, nil
}

// serverConfig is ServerConfig without its own certificate.
func serverConfig(caPEM []byte) (*tls.Config, error) {
	ca, err := parseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientCAs:  pool,
		// The chain and the client EKU are checked by the standard verification; the name
		// here, so that no other client certificate the CA issued is served.
		ClientAuth: tls.RequireAndVerifyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != ControlPlaneName {
				return errors.New("podtls: the client is not the control plane")
			}
			return nil
		},
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate: %w", errdefs.ErrInvalidArgument)
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("no PEM PKCS #8 key: %w", errdefs.ErrInvalidArgument)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key cannot sign: %w", errdefs.ErrInvalidArgument)
	}
	return s, nil
}
