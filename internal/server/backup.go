package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandboxops"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/store"
)

// ManifestFormat is the first line of meaning of a backup's manifest.json: a restore
// refuses any other.
const ManifestFormat = "paddock-backup 1"

// ManifestName is the manifest's file name in a backup directory.
const ManifestName = "manifest.json"

// Manifest describes one `paddock admin backup`: the database copy and the small files
// copied beside it (each with its SHA-256, checked on restore), the key files that are
// kept apart from it, and what lives elsewhere and is backed up on its own.
type Manifest struct {
	Format   string    `json:"format"`
	Created  time.Time `json:"created"`
	Version  string    `json:"paddock_version"`
	Database Database  `json:"database"`
	// Files are copied into the backup directory (configuration, policies, per-user
	// settings): nothing in them is a secret.
	Files []File `json:"files"`
	// KeepApart are the key files: whoever holds them and the database reads every
	// user's secret, so they are never written into the backup directory, only listed
	// (and copied to --keys when given, a different directory).
	KeepApart []File `json:"keep_apart"`
	// Elsewhere is what the backup does not copy: the workspaces and artifacts.
	Elsewhere []Place `json:"elsewhere"`
}

// Database is the database copy in a backup.
type Database struct {
	Backend string `json:"backend"` // sqlite or postgres
	File    string `json:"file"`    // in the backup directory
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
	Schema  int    `json:"schema_version,omitempty"` // SQLite only: read back from the copy
	From    string `json:"from"`                     // the file, or the URL without its password
}

// File is one file a backup copied or lists.
type File struct {
	Name string `json:"name"` // in the backup (or keys) directory
	What string `json:"what"`
	From string `json:"from"` // where it was on the backed-up machine
	// Restore is where `paddock admin restore` puts it, relative to the data dir; empty
	// when the operator places it (the configuration file and the files it names).
	Restore  string `json:"restore,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Size     int64  `json:"size"`
	Required bool   `json:"required,omitempty"`
	Dir      bool   `json:"dir,omitempty"` // a directory tree (the users dir); no hash
}

// Place is something a backup leaves where it is.
type Place struct {
	What string `json:"what"`
	Path string `json:"path"`
	How  string `json:"how"`
}

// BackupOptions are `paddock admin backup`'s arguments.
type BackupOptions struct {
	Dir        string // the backup directory: absent or empty
	KeysDir    string // where to copy the key files (not inside Dir); empty: only list them
	ConfigFile string // the configuration file serve runs with, copied when given
	Version    string
}

// Backup writes a backup of the control plane that cfg describes into opts.Dir while it
// keeps serving: a consistent copy of its database, its configuration and per-user
// files, and a manifest listing the key files to keep apart.
func Backup(ctx context.Context, cfg Config, opts BackupOptions) (Manifest, error) {
	m := Manifest{Format: ManifestFormat, Created: time.Now().UTC().Truncate(time.Second), Version: opts.Version}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	var keys string
	if opts.KeysDir != "" {
		if keys, err = filepath.Abs(opts.KeysDir); err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		if within(keys, dir) || within(dir, keys) {
			return m, fmt.Errorf("backup: --keys %s must be apart from the backup directory %s (whoever holds both reads every secret): %w",
				keys, dir, errdefs.ErrInvalidArgument)
		}
	}
	if cfg.Store == "" {
		if _, err := os.Stat(DatabasePath(cfg)); err != nil {
			return m, fmt.Errorf("backup: no paddock database at %s: give the server's --data or --config: %w", DatabasePath(cfg), errdefs.ErrNotFound)
		}
	}
	if err := emptyDir(dir); err != nil {
		return m, err
	}
	if keys != "" {
		if err := emptyDir(keys); err != nil {
			return m, err
		}
	}

	// The database first: the files below change rarely, and a key added after the copy
	// (a rotation) only adds versions the copy does not need.
	if cfg.Store != "" {
		m.Database = Database{Backend: "postgres", File: "paddock.pgdump", From: store.RedactURL(cfg.Store)}
		if err := store.BackupPostgres(ctx, cfg.Store, filepath.Join(dir, m.Database.File)); err != nil {
			return m, err
		}
	} else {
		m.Database = Database{Backend: "sqlite", File: "paddock.db", From: DatabasePath(cfg)}
		if m.Database.Schema, err = store.BackupSQLite(ctx, DatabasePath(cfg), filepath.Join(dir, m.Database.File)); err != nil {
			return m, err
		}
	}
	if m.Database.SHA256, m.Database.Size, err = hashFile(filepath.Join(dir, m.Database.File)); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}

	// Key files: listed with their hash, copied only to the keys directory.
	data := cfg.Runner.DataDir
	ks := SecretsKeySource(cfg)
	if ks.Env == "" {
		m.KeepApart = append(m.KeepApart, File{Name: secrets.KeyFileName, What: "the secrets keyring: decrypts every user's secret in the database",
			From: ks.File, Restore: secrets.KeyFileName, Required: true})
	} else {
		m.Elsewhere = append(m.Elsewhere, Place{What: "the secrets key", Path: "environment variable " + secrets.EnvKey,
			How: "keep the key apart from this backup; give it to the new machine's paddock serve the same way"})
	}
	m.KeepApart = append(m.KeepApart,
		File{Name: sandboxops.KeysFile, What: "the capability keyring: signs the tokens sandboxes present", From: filepath.Join(data, sandboxops.KeysFile), Restore: sandboxops.KeysFile},
		File{Name: HandoffsFileName, What: "the apps hosts' sign-ins (without it, users sign in to their apps again)", From: filepath.Join(data, HandoffsFileName), Restore: HandoffsFileName})
	if cfg.Metrics.TokenFile != "" {
		m.KeepApart = append(m.KeepApart, File{Name: "metrics.token", What: "the /metrics bearer token (metrics.token_file)", From: cfg.Metrics.TokenFile})
	}
	for i, p := range cfg.Gateway.Providers {
		if p.APIKeyFile != "" {
			m.KeepApart = append(m.KeepApart, File{Name: fmt.Sprintf("gateway-%d-%s.key", i, p.Name), What: "provider " + p.Name + "'s API key (gateway api_key_file)", From: p.APIKeyFile})
		}
	}
	if b := cfg.Backup; b.On() {
		kf := File{Name: BackupKeyFileName, What: "the workspace backups' key: opens every backup in the S3 store", From: b.keyFile(data)}
		if b.KeyFile == "" {
			kf.Restore = BackupKeyFileName
		}
		m.KeepApart = append(m.KeepApart, kf,
			File{Name: "backup-access.key", What: "the S3 store's access key (backup.access_key_file)", From: b.AccessKeyFile},
			File{Name: "backup-secret.key", What: "the S3 store's secret key (backup.secret_key_file)", From: b.SecretKeyFile})
	}
	kept := m.KeepApart[:0]
	for _, f := range m.KeepApart {
		if f.SHA256, f.Size, err = hashFile(f.From); errors.Is(err, fs.ErrNotExist) && !f.Required {
			continue // never made: nothing to keep
		} else if err != nil {
			return m, fmt.Errorf("backup: %s (%s): %w", f.From, f.What, err)
		}
		if keys != "" {
			if err := copyFile(f.From, filepath.Join(keys, f.Name)); err != nil {
				return m, fmt.Errorf("backup: %w", err)
			}
		}
		kept = append(kept, f)
	}
	m.KeepApart = kept

	// Configuration: copied, hashed; the operator puts it back where the new machine's
	// configuration names it.
	files := []File{}
	if opts.ConfigFile != "" {
		files = append(files, File{Name: "paddock.yaml", What: "the configuration file (--config)", From: opts.ConfigFile, Required: true})
	}
	for _, f := range []struct{ key, path string }{{"policy", cfg.Policy}, {"broker_policy", cfg.BrokerPolicy}, {"network_policy", cfg.NetworkPolicy}} {
		if f.path != "" {
			files = append(files, File{Name: f.key + ".yaml", What: "the " + f.key + " file", From: f.path, Required: true})
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o700); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	for _, f := range files {
		f.Name = "files/" + f.Name
		if err := copyFile(f.From, filepath.Join(dir, f.Name)); err != nil {
			return m, fmt.Errorf("backup: %s: %w", f.What, err)
		}
		if f.SHA256, f.Size, err = hashFile(filepath.Join(dir, f.Name)); err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		m.Files = append(m.Files, f)
	}
	if st, err := os.Stat(cfg.Runner.UsersDir); err == nil && st.IsDir() {
		u := File{Name: "users", What: "per-user settings and policies (users_dir)", From: cfg.Runner.UsersDir, Dir: true}
		if rel, err := filepath.Rel(data, cfg.Runner.UsersDir); err == nil && !strings.HasPrefix(rel, "..") {
			u.Restore = rel
		}
		if err := copyTree(cfg.Runner.UsersDir, filepath.Join(dir, u.Name)); err != nil {
			return m, fmt.Errorf("backup: users dir: %w", err)
		}
		m.Files = append(m.Files, u)
	}
	m.Elsewhere = append(m.Elsewhere,
		Place{What: "workspaces and their history", Path: cfg.Runner.WorkspaceRoot,
			How: "copy the tree with ownership (rsync -aHAX --numeric-ids), sandboxes stopped, or back them up to S3"},
		Place{What: "artifacts", Path: filepath.Join(data, "artifacts"), How: "copy the tree (content-addressed: files never change once written)"})

	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o600); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

// RestoreOptions are `paddock admin restore`'s arguments.
type RestoreOptions struct {
	Dir     string // a backup directory (Backup)
	KeysDir string // where the key files were kept apart
}

// Restore puts a backup in place for cfg, a new install: the database (into its empty
// data dir, or its empty PostgreSQL database), the key files from opts.KeysDir and the
// per-user files. Every file is checked against the manifest's hash first, and a
// mismatch is refused naming the file. It returns the manifest, whose Elsewhere the
// operator copies by hand.
func Restore(ctx context.Context, cfg Config, opts RestoreOptions) (Manifest, error) {
	m, err := ReadManifest(opts.Dir)
	if err != nil {
		return m, err
	}
	data := cfg.Runner.DataDir
	db := filepath.Join(opts.Dir, m.Database.File)
	if err := checkHash(db, m.Database.SHA256, "the database copy "+m.Database.File); err != nil {
		return m, err
	}
	for _, f := range m.Files {
		if !f.Dir {
			if err := checkHash(filepath.Join(opts.Dir, f.Name), f.SHA256, f.What+" "+f.Name); err != nil {
				return m, err
			}
		}
	}
	for _, f := range m.KeepApart {
		if f.Restore == "" {
			continue
		}
		if opts.KeysDir == "" {
			if f.Required {
				return m, fmt.Errorf("restore: give --keys, the directory holding %s (%s): %w", f.Name, f.What, errdefs.ErrInvalidArgument)
			}
			continue
		}
		if err := checkHash(filepath.Join(opts.KeysDir, f.Name), f.SHA256, f.What+" "+f.Name); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) && !f.Required {
				continue
			}
			return m, err
		}
	}

	switch {
	case m.Database.Backend == "postgres" && cfg.Store == "":
		return m, fmt.Errorf("restore: the backup is of a PostgreSQL database: give the new, empty database with --store: %w", errdefs.ErrInvalidArgument)
	case m.Database.Backend == "sqlite" && cfg.Store != "":
		return m, fmt.Errorf("restore: the backup is of a SQLite database; restoring it into PostgreSQL is not supported: leave --store out: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(data, 0o711); err != nil {
		return m, fmt.Errorf("restore: data dir: %w", err)
	}
	if _, err := os.Stat(DatabasePath(cfg)); err == nil && cfg.Store == "" {
		return m, fmt.Errorf("restore: %s already exists: restore into a new data dir: %w", DatabasePath(cfg), errdefs.ErrAlreadyExists)
	}
	// Key files before the database: a serve started half-way then refuses for want of
	// the database rather than making a fresh secrets key.
	for _, f := range m.KeepApart {
		if f.Restore == "" || opts.KeysDir == "" {
			continue
		}
		src := filepath.Join(opts.KeysDir, f.Name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		dst := filepath.Join(data, f.Restore)
		if f.Name == secrets.KeyFileName {
			dst = SecretsKeySource(cfg).File
		}
		if _, err := os.Stat(dst); err == nil {
			return m, fmt.Errorf("restore: %s already exists: restore into a new data dir: %w", dst, errdefs.ErrAlreadyExists)
		}
		if err := copyFile(src, dst); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
	}
	for _, f := range m.Files {
		if !f.Dir || f.Restore == "" {
			continue
		}
		dst := filepath.Join(data, f.Restore)
		if entries, _ := os.ReadDir(dst); len(entries) > 0 {
			return m, fmt.Errorf("restore: %s is not empty: restore into a new data dir: %w", dst, errdefs.ErrAlreadyExists)
		}
		if err := copyTree(filepath.Join(opts.Dir, f.Name), dst); err != nil {
			return m, fmt.Errorf("restore: %w", err)
		}
	}
	if m.Database.Backend == "postgres" {
		return m, store.RestorePostgres(ctx, cfg.Store, db)
	}
	if _, err := store.CheckSQLiteCopy(ctx, db); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	tmp := DatabasePath(cfg) + ".restoring"
	if err := copyFile(db, tmp); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	if err := os.Rename(tmp, DatabasePath(cfg)); err != nil {
		return m, fmt.Errorf("restore: %w", err)
	}
	return m, nil
}

// ReadManifest reads and checks a backup directory's manifest.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return m, fmt.Errorf("restore: %s has no %s (is it a paddock admin backup directory?): %w", dir, ManifestName, errdefs.ErrNotFound)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("restore: %s: %v: %w", filepath.Join(dir, ManifestName), err, errdefs.ErrInvalidArgument)
	}
	if m.Format != ManifestFormat {
		return m, fmt.Errorf("restore: %s: format %q, want %q: %w", filepath.Join(dir, ManifestName), m.Format, ManifestFormat, errdefs.ErrInvalidArgument)
	}
	names := []string{m.Database.File}
	for _, f := range append(append([]File{}, m.Files...), m.KeepApart...) {
		names = append(names, f.Name, f.Restore)
	}
	for _, n := range names {
		if n != "" && (!filepath.IsLocal(n) || strings.Contains(n, "\\")) {
			return m, fmt.Errorf("restore: %s: file name %q leaves its directory: %w", filepath.Join(dir, ManifestName), n, errdefs.ErrInvalidArgument)
		}
	}
	if m.Database.Backend != "sqlite" && m.Database.Backend != "postgres" || m.Database.File == "" {
		return m, fmt.Errorf("restore: %s: database backend %q, want sqlite or postgres: %w", filepath.Join(dir, ManifestName), m.Database.Backend, errdefs.ErrInvalidArgument)
	}
	return m, nil
}

// within says whether p is dir or inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// emptyDir makes dir (0700) or checks that it is empty: a backup never mixes with another.
func emptyDir(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("backup: %s is not empty: give a new directory: %w", dir, errdefs.ErrAlreadyExists)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// checkHash refuses a file that is absent or whose SHA-256 is not the manifest's.
func checkHash(path, want, what string) error {
	got, _, err := hashFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore: %s: %s is absent: %w", what, path, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("restore: %s: %w", what, err)
	}
	if got != want {
		return fmt.Errorf("restore: %s: %s has SHA-256 %s, the manifest says %s: it is damaged or not this backup's: %w",
			what, path, got, want, errdefs.ErrDataLoss)
	}
	return nil
}

// copyFile copies src to dst (0600), which must not exist, and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyTree copies the regular files and directories under src to dst; symlinks and
// other files are skipped (the users dir holds YAML files only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o700)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil
	})
}

// StoreTargetRedacted is StoreTarget without a password, for messages.
func StoreTargetRedacted(cfg Config) string {
	if cfg.Store != "" {
		return store.RedactURL(cfg.Store)
	}
	return DatabasePath(cfg)
}
