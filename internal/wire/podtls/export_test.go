package podtls

import (
	"crypto/x509"
	"crypto/x509/pkix"
)

// IssueClientForTest issues a client certificate to name, as no caller of the package can.
func IssueClientForTest(ca *CA, name string) (Pair, error) {
	return ca.issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}
