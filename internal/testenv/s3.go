package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/paddockhq/paddock/internal/spawn"
)

// S3 is an S3 store on loopback with a bucket made for the test.
type S3 struct {
	Endpoint             string // http://127.0.0.1:port
	AccessKey, SecretKey string
	Client               *minio.Client
	Bucket               string
}

// WeedBinary is SeaweedFS's server, built by scripts/setup.sh: $PADDOCK_WEED, else
// paddock's install, else $PATH.
func WeedBinary() string {
	if p := os.Getenv("PADDOCK_WEED"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/local/lib/paddock/bin/weed"); err == nil {
		return "/usr/local/lib/paddock/bin/weed"
	}
	if p, err := exec.LookPath("weed"); err == nil {
		return p
	}
	return ""
}

// freePorts reserves n loopback ports and releases them for the server to take.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	var ports []int
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ErrNoWeed is why RunS3 cannot start: SeaweedFS is not installed.
var ErrNoWeed = errors.New("SeaweedFS (weed) is not installed; scripts/setup.sh builds it, or set PADDOCK_WEED")

// StartS3 starts SeaweedFS (`weed mini`: master, volume, filer and S3 gateway) on
// loopback in a temporary directory, with an access key, and returns a client and a
// fresh bucket. It skips, saying so, only when the weed binary is absent.
func StartS3(t testing.TB) S3 {
	t.Helper()
	s3, stop, err := RunS3(t.TempDir())
	if errors.Is(err, ErrNoWeed) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s3
}

// RunS3 is StartS3 outside a test: SeaweedFS in dir, until stop is called.
func RunS3(dir string) (s3 S3, stop func(), err error) {
	bin := WeedBinary()
	if bin == "" {
		return S3{}, nil, ErrNoWeed
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return S3{}, nil, err
	}
	p, err := freePorts(10)
	if err != nil {
		return S3{}, nil, err
	}
	cmd := exec.Command(bin, "mini", "-dir="+dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		fmt.Sprint("-master.port=", p[0]), fmt.Sprint("-master.port.grpc=", p[1]),
		fmt.Sprint("-volume.port=", p[2]), fmt.Sprint("-volume.port.grpc=", p[3]),
		fmt.Sprint("-filer.port=", p[4]), fmt.Sprint("-filer.port.grpc=", p[5]),
		fmt.Sprint("-s3.port=", p[6]), fmt.Sprint("-s3.port.grpc=", p[7]),
		fmt.Sprint("-admin.port=", p[8]), fmt.Sprint("-admin.port.grpc=", p[9]),
		"-admin.ui=false", "-admin.port.legacy=0", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=paddocktest", "AWS_SECRET_ACCESS_KEY=paddocktest-secret-0123456789")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil { // its Pdeathsig then follows this process
		return S3{}, nil, err
	}
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", p[6])
	cl, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4("paddocktest", "paddocktest-secret-0123456789", ""), Region: "us-east-1"})
	if err != nil {
		stop()
		return S3{}, nil, err
	}
	ctx := context.Background()
	// Up when a bucket can be made: the gateway answers before the volume server is ready.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err = cl.MakeBucket(ctx, "backups", minio.MakeBucketOptions{})
		if err == nil {
			if _, err = cl.PutObject(ctx, "backups", "probe", strings.NewReader("x"), 1, minio.PutObjectOptions{}); err == nil {
				_ = cl.RemoveObject(ctx, "backups", "probe", minio.RemoveObjectOptions{})
				break
			}
		}
		if resp := (minio.ErrorResponse{}); errors.As(err, &resp) && resp.Code == "BucketAlreadyOwnedByYou" {
			continue
		}
		if time.Now().After(deadline) {
			stop()
			return S3{}, nil, fmt.Errorf("SeaweedFS did not serve S3 on %s: %w\n%s", endpoint, err, log.String())
		}
		if c, _ := http.Get("http://" + endpoint); c != nil {
			c.Body.Close()
		}
	}
	return S3{Endpoint: "http://" + endpoint, AccessKey: "paddocktest", SecretKey: "paddocktest-secret-0123456789", Client: cl, Bucket: "backups"}, stop, nil
}

// syncBuffer is a bytes.Buffer the server's output goroutines may write while it is read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
