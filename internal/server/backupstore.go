package server

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wsbackup"
)

// BackupKeyFileName is the backup key's file in the data dir when backup.key_file is not
// given.
const BackupKeyFileName = "backup.key"

// BackupConfig is where sandboxes' workspace histories are backed up: an S3-compatible
// store. Without an endpoint there are no backups.
type BackupConfig struct {
	// Endpoint is the store's URL (https://s3.example.com, or http:// for one on loopback).
	Endpoint string `yaml:"endpoint"`
	// Bucket holds the backups, under Prefix.
	Bucket string `yaml:"bucket"`
	Prefix string `yaml:"prefix"`
	Region string `yaml:"region"`
	// AccessKeyFile and SecretKeyFile hold the store's credentials, one line each.
	AccessKeyFile string `yaml:"access_key_file"`
	SecretKeyFile string `yaml:"secret_key_file"`
	// KeyFile is the backup key (32 bytes) that seals every object (an absolute path;
	// default <data_dir>/backup.key, made on first start). Without it no backup restores.
	KeyFile string `yaml:"key_file"`
	// Every backs up every running sandbox this often ("6h"); empty: only on request.
	Every string `yaml:"every"`
	// Retries is how many times a backup is tried again while the store is down or
	// failing (default 5); RetryBackoff the first pause, doubled each time (default 2s).
	Retries      *int   `yaml:"retries"`
	RetryBackoff string `yaml:"retry_backoff"`
	// KeepLast turns retention on: each sandbox's newest KeepLast backups are kept, and
	// the newest of each of the KeepDaily days up to today; the others are deleted once a
	// day, then every blob no kept backup names, unless it is younger than PruneGrace
	// (default 24h: a backup under way uploads its blobs before its manifest).
	KeepLast   int    `yaml:"keep_last"`
	KeepDaily  int    `yaml:"keep_daily"`
	PruneGrace string `yaml:"prune_grace"`
}

// On says whether backups are configured.
func (b BackupConfig) On() bool { return b.Endpoint != "" }

// keyFile is the backup key's path.
func (b BackupConfig) keyFile(dataDir string) string {
	if b.KeyFile != "" {
		return b.KeyFile
	}
	return filepath.Join(dataDir, BackupKeyFileName)
}

// check refuses a backup section that cannot work, naming the field.
func (b BackupConfig) check() error {
	if !b.On() {
		if b != (BackupConfig{}) {
			return fmt.Errorf("backup.endpoint is required when the backup section is given: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	u, err := url.Parse(b.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return fmt.Errorf("backup.endpoint: want http(s)://host[:port] without credentials or path: %w", errdefs.ErrInvalidArgument)
	}
	if b.Bucket == "" {
		return fmt.Errorf("backup.bucket is required: %w", errdefs.ErrInvalidArgument)
	}
	if b.Prefix != "" && !strings.HasSuffix(b.Prefix, "/") {
		return fmt.Errorf("backup.prefix: %q must end in /: %w", b.Prefix, errdefs.ErrInvalidArgument)
	}
	if b.AccessKeyFile == "" || b.SecretKeyFile == "" {
		return fmt.Errorf("backup.access_key_file and backup.secret_key_file are required: %w", errdefs.ErrInvalidArgument)
	}
	if b.KeyFile != "" && !filepath.IsAbs(b.KeyFile) {
		return fmt.Errorf("backup.key_file: %q is not an absolute path: %w", b.KeyFile, errdefs.ErrInvalidArgument)
	}
	if b.KeepLast < 0 || b.KeepDaily < 0 {
		return fmt.Errorf("backup.keep_last %d, backup.keep_daily %d: want 0 or more: %w", b.KeepLast, b.KeepDaily, errdefs.ErrInvalidArgument)
	}
	if b.KeepLast == 0 && (b.KeepDaily > 0 || b.PruneGrace != "") {
		return fmt.Errorf("backup.keep_last is required (at least 1) with keep_daily or prune_grace: retention never drops a sandbox's newest backup: %w", errdefs.ErrInvalidArgument)
	}
	for field, d := range map[string]string{"every": b.Every, "retry_backoff": b.RetryBackoff, "prune_grace": b.PruneGrace} {
		if d == "" {
			continue
		}
		if v, err := time.ParseDuration(d); err != nil || v <= 0 {
			return fmt.Errorf("backup.%s: %q is not a positive duration (like 6h): %w", field, d, errdefs.ErrInvalidArgument)
		}
	}
	if b.Retries != nil && (*b.Retries < 0 || *b.Retries > 100) {
		return fmt.Errorf("backup.retries: %d, want 0 to 100: %w", *b.Retries, errdefs.ErrInvalidArgument)
	}
	return nil
}

func readKeyLine(field, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("backup.%s: %s: %w", field, path, errdefs.ErrNotFound)
	}
	s := strings.TrimSpace(string(b))
	if s == "" || strings.ContainsAny(s, "\n\r") {
		return "", fmt.Errorf("backup.%s: %s must hold one line: %w", field, path, errdefs.ErrInvalidArgument)
	}
	return s, nil
}

// backupKey reads the backup key, making it (0600) when the file does not exist.
func backupKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, wsbackup.KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("backup.key_file: make %s: %w", path, err)
		}
		_, err = f.Write(key)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return key, err
	}
	if err != nil {
		return nil, fmt.Errorf("backup.key_file: %s: %w", path, err)
	}
	if len(key) != wsbackup.KeySize {
		return nil, fmt.Errorf("backup.key_file: %s holds %d bytes, want %d: %w", path, len(key), wsbackup.KeySize, errdefs.ErrInvalidArgument)
	}
	return key, nil
}

// newBackups is the backup store cfg names, or nil without one.
func newBackups(cfg Config, st *store.Store, log *slog.Logger) (*sandboxops.Backups, error) {
	b := cfg.Backup
	if !b.On() {
		return nil, nil
	}
	access, err := readKeyLine("access_key_file", b.AccessKeyFile)
	if err != nil {
		return nil, err
	}
	secret, err := readKeyLine("secret_key_file", b.SecretKeyFile)
	if err != nil {
		return nil, err
	}
	key, err := backupKey(b.keyFile(cfg.Runner.DataDir))
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(b.Endpoint)
	cl, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: u.Scheme == "https", Region: b.Region})
	if err != nil {
		return nil, fmt.Errorf("backup.endpoint: %w", errdefs.ErrInvalidArgument)
	}
	// The objects go under the key's namespace: another install's backups into the same
	// bucket and prefix are never listed, read nor deleted here.
	ns, err := wsbackup.Namespace(key)
	if err != nil {
		return nil, err
	}
	shared := wsbackup.Target{Client: cl, Bucket: b.Bucket, Prefix: b.Prefix}
	out := &sandboxops.Backups{Target: wsbackup.Target{Client: cl, Bucket: b.Bucket, Prefix: b.Prefix + ns + "/"}, Shared: shared, Namespace: ns,
		Key: key, Retries: 5, Backoff: 2 * time.Second, Leases: st, Replica: cfg.Replica.ID, Log: log}
	if b.Retries != nil {
		out.Retries = *b.Retries
	}
	if b.RetryBackoff != "" {
		out.Backoff, _ = time.ParseDuration(b.RetryBackoff)
	}
	if b.KeepLast > 0 {
		out.Retention = &wsbackup.Retention{KeepLast: b.KeepLast, KeepDaily: b.KeepDaily, Grace: 24 * time.Hour}
		if b.PruneGrace != "" {
			out.Retention.Grace, _ = time.ParseDuration(b.PruneGrace)
		}
	}
	return out, nil
}

// backupEvery is the schedule's period, zero without one.
func (b BackupConfig) every() time.Duration {
	d, _ := time.ParseDuration(b.Every)
	return d
}
