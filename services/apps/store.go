package apps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

// Config configures a Store. Zero fields take the documented defaults.
type Config struct {
	// Key seals and opens credentials. Default: none; then Add and Rotate
	// of credentials and Load of an app that has any are ErrNoSecretsKey,
	// while List and Get (public parts only) work.
	Key *secrets.Key
	// Default is what the environment defines for the default app
	// (credentials included); Load, List and Get report it under the
	// default app's row. Default: the default app has no credentials.
	Default *App
	// Logger receives Watch's reload errors. Default slog.Default().
	Logger *slog.Logger
}

// Store reads and writes apps in Postgres.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
}

// NewStore returns a Store over pool.
func NewStore(pool *pgxpool.Pool, cfg Config) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Store{pool: pool, cfg: cfg}
}

// Snapshot is every app as of one generation.
type Snapshot struct {
	Generation int64
	Apps       []App
}

// App returns the app of that name, or nil.
func (s Snapshot) App(name string) *App {
	for i := range s.Apps {
		if s.Apps[i].Name == name {
			return &s.Apps[i]
		}
	}
	return nil
}

// row is one apps row as stored: public columns and sealed blobs.
type row struct {
	name                         string
	version                      int64
	createdAt, updatedAt         time.Time
	vapidSubject                 string
	fcmProject, fcmEmail, fcmURL string
	fcmSealed                    []byte
	apnsTeam, apnsKeyID, apnsEnv string
	apnsURL                      string
	apnsTopics                   []string
	apnsSealed                   []byte
	// fcmRate and apnsConns: 0 is unset (the worker's default).
	fcmRate, apnsConns int
	keys               []keyRow
}

type keyRow struct {
	id        int64
	public    string
	sealed    []byte
	createdAt time.Time
	retiredAt *time.Time
}

const (
	sqlAppColumns = `name, version, created_at, updated_at, coalesce(vapid_subject, ''),
		coalesce(fcm_project_id, ''), coalesce(fcm_client_email, ''), coalesce(fcm_endpoint, ''), fcm_credentials,
		coalesce(apns_team_id, ''), coalesce(apns_key_id, ''), coalesce(apns_environment, ''), coalesce(apns_endpoint, ''),
		coalesce(apns_topics, '{}'), apns_key, coalesce(fcm_rate_limit, 0), coalesce(apns_connections, 0)`
	sqlSelectApps    = `SELECT ` + sqlAppColumns + ` FROM apps ORDER BY name`
	sqlSelectApp     = `SELECT ` + sqlAppColumns + ` FROM apps WHERE name = $1`
	sqlSelectAppLock = sqlSelectApp + ` FOR UPDATE`
	// Newest first: the current key, then the retired ones.
	sqlSelectKeys = `SELECT app, id, public_key, private_key, created_at, retired_at FROM app_vapid_keys
		WHERE $1::text IS NULL OR app = $1 ORDER BY app, id DESC`
	sqlInsertApp = `INSERT INTO apps (name, vapid_subject, fcm_project_id, fcm_client_email, fcm_endpoint, fcm_credentials,
			apns_team_id, apns_key_id, apns_environment, apns_endpoint, apns_topics, apns_key, fcm_rate_limit, apns_connections)
		VALUES ($1, nullif($2, ''), nullif($3, ''), nullif($4, ''), nullif($5, ''), $6,
			nullif($7, ''), nullif($8, ''), nullif($9, ''), nullif($10, ''), nullif($11::text[], '{}'), $12,
			nullif($13::int, 0), nullif($14::int, 0))
		ON CONFLICT (name) DO NOTHING`
	sqlUpdateApp = `UPDATE apps SET vapid_subject = nullif($2, ''), fcm_project_id = nullif($3, ''),
			fcm_client_email = nullif($4, ''), fcm_endpoint = nullif($5, ''), fcm_credentials = $6,
			apns_team_id = nullif($7, ''), apns_key_id = nullif($8, ''), apns_environment = nullif($9, ''),
			apns_endpoint = nullif($10, ''), apns_topics = nullif($11::text[], '{}'), apns_key = $12,
			fcm_rate_limit = nullif($13::int, 0), apns_connections = nullif($14::int, 0),
			version = version + 1, updated_at = now()
		WHERE name = $1`
	sqlRetireKeys  = `UPDATE app_vapid_keys SET retired_at = now() WHERE app = $1 AND retired_at IS NULL`
	sqlInsertKey   = `INSERT INTO app_vapid_keys (app, public_key, private_key) VALUES ($1, $2, $3)`
	sqlCountDevice = `SELECT count(*) FROM push_subscriptions WHERE app = $1`
	sqlDeleteApp   = `DELETE FROM apps WHERE name = $1`
	sqlGeneration  = `SELECT generation FROM apps_generation`
	// The ids of the keys that sealed what is stored (byte 2–9 of a blob,
	// see package secrets).
	sqlSealingKeys = `SELECT DISTINCT encode(substring(b from 2 for 8), 'hex') FROM (
		SELECT fcm_credentials AS b FROM apps UNION ALL SELECT apns_key FROM apps
		UNION ALL SELECT private_key FROM app_vapid_keys) s WHERE b IS NOT NULL`
)

func scanRow(r pgx.Row) (row, error) {
	var a row
	err := r.Scan(&a.name, &a.version, &a.createdAt, &a.updatedAt, &a.vapidSubject,
		&a.fcmProject, &a.fcmEmail, &a.fcmURL, &a.fcmSealed,
		&a.apnsTeam, &a.apnsKeyID, &a.apnsEnv, &a.apnsURL, &a.apnsTopics, &a.apnsSealed, &a.fcmRate, &a.apnsConns)
	return a, err
}

// read loads the rows (one app, or all when name is "") and their keys.
func read(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string, lock bool) ([]row, error) {
	var rows []row
	if name != "" {
		sql := sqlSelectApp
		if lock {
			sql = sqlSelectAppLock
		}
		a, err := scanRow(q.QueryRow(ctx, sql, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w %q", ErrNotFound, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read app %s: %w", name, err)
		}
		rows = append(rows, a)
	} else {
		rs, err := q.Query(ctx, sqlSelectApps)
		if err != nil {
			return nil, fmt.Errorf("read apps: %w", err)
		}
		for rs.Next() {
			a, err := scanRow(rs)
			if err != nil {
				rs.Close()
				return nil, fmt.Errorf("read apps: %w", err)
			}
			rows = append(rows, a)
		}
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("read apps: %w", err)
		}
	}
	var filter *string
	if name != "" {
		filter = &name
	}
	ks, err := q.Query(ctx, sqlSelectKeys, filter)
	if err != nil {
		return nil, fmt.Errorf("read VAPID keys: %w", err)
	}
	defer ks.Close()
	for ks.Next() {
		var app string
		var k keyRow
		if err := ks.Scan(&app, &k.id, &k.public, &k.sealed, &k.createdAt, &k.retiredAt); err != nil {
			return nil, fmt.Errorf("read VAPID keys: %w", err)
		}
		for i := range rows {
			if rows[i].name == app {
				rows[i].keys = append(rows[i].keys, k)
			}
		}
	}
	return rows, ks.Err()
}

// public is the row's app without private parts.
func (s *Store) public(r row) App {
	a := App{Name: r.name, Source: "database", Version: r.version, CreatedAt: r.createdAt.UTC(), UpdatedAt: r.updatedAt.UTC()}
	if r.name == Default {
		a.Source = "environment"
		if d := s.cfg.Default; d != nil {
			a.WebPush, a.FCM, a.APNs = d.WebPush, d.FCM, d.APNs
		}
		return a
	}
	if len(r.keys) > 0 {
		a.WebPush = &WebPush{Subject: r.vapidSubject}
		for _, k := range r.keys {
			vk := VAPIDKey{ID: k.id, PublicKey: k.public, CreatedAt: k.createdAt.UTC()}
			if k.retiredAt != nil {
				t := k.retiredAt.UTC()
				vk.RetiredAt = &t
			}
			a.WebPush.Keys = append(a.WebPush.Keys, vk)
		}
	}
	if r.fcmSealed != nil {
		a.FCM = &FCM{ProjectID: r.fcmProject, ClientEmail: r.fcmEmail, Endpoint: r.fcmURL, RateLimit: r.fcmRate}
	}
	if r.apnsSealed != nil {
		a.APNs = &APNs{TeamID: r.apnsTeam, KeyID: r.apnsKeyID, Topics: r.apnsTopics, Environment: r.apnsEnv, Endpoint: r.apnsURL,
			Connections: r.apnsConns}
	}
	return a
}

func aad(app, field string) []byte { return []byte(app + "\x00" + field) }

func vapidField(public string) string { return "vapid_private_key:" + public }

// open is the row's app with its private parts opened.
func (s *Store) open(r row) (App, error) {
	a := s.public(r)
	if r.name == Default {
		if s.cfg.Default != nil {
			a.WebPush, a.FCM, a.APNs = s.cfg.Default.WebPush, s.cfg.Default.FCM, s.cfg.Default.APNs
		}
		return a, nil
	}
	if s.cfg.Key == nil && (r.fcmSealed != nil || r.apnsSealed != nil || len(r.keys) > 0) {
		return a, fmt.Errorf("app %s has encrypted credentials: %w", r.name, ErrNoSecretsKey)
	}
	for i, k := range r.keys {
		b, err := s.cfg.Key.Open(k.sealed, aad(r.name, vapidField(k.public)))
		if err != nil {
			return a, fmt.Errorf("app %s: VAPID key %d: %w", r.name, k.id, err)
		}
		vk, err := webpush.ParseVAPIDKey(string(b))
		if err != nil || vk.PublicKey() != k.public {
			return a, fmt.Errorf("app %s: VAPID key %d does not match its public key", r.name, k.id)
		}
		a.WebPush.Keys[i].Private = NewSecret(vk)
	}
	if r.fcmSealed != nil {
		b, err := s.cfg.Key.Open(r.fcmSealed, aad(r.name, "fcm_credentials"))
		if err != nil {
			return a, fmt.Errorf("app %s: FCM credentials: %w", r.name, err)
		}
		c, err := fcm.ParseCredentials(b)
		if err != nil {
			return a, fmt.Errorf("app %s: FCM credentials: %v", r.name, redactFCMError(err))
		}
		a.FCM.Credentials = NewSecret(c)
	}
	if r.apnsSealed != nil {
		b, err := s.cfg.Key.Open(r.apnsSealed, aad(r.name, "apns_key"))
		if err != nil {
			return a, fmt.Errorf("app %s: APNs key: %w", r.name, err)
		}
		k, err := apns.ParsePrivateKey(b)
		if err != nil {
			return a, fmt.Errorf("app %s: APNs key: %w", r.name, err)
		}
		a.APNs.Key = NewSecret(k)
	}
	return a, nil
}

// Open is one app with its credentials opened, as Load has it: what
// `notify webpush|fcm|apns send --app` sends with. ErrNotFound when there
// is no such app.
func (s *Store) Open(ctx context.Context, name string) (App, error) {
	rows, err := read(ctx, s.pool, name, false)
	if err != nil {
		return App{}, err
	}
	return s.open(rows[0])
}

// Load returns every app with its credentials opened, as of one
// generation: what a push worker sends with. A missing or wrong secrets
// key is an error naming the setting (ErrNoSecretsKey, secrets.ErrWrongKey).
func (s *Store) Load(ctx context.Context) (Snapshot, error) {
	var snap Snapshot
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlGeneration).Scan(&snap.Generation); err != nil {
			return fmt.Errorf("read apps generation: %w", err)
		}
		rows, err := read(ctx, tx, "", false)
		if err != nil {
			return err
		}
		for _, r := range rows {
			a, err := s.open(r)
			if err != nil {
				return err
			}
			snap.Apps = append(snap.Apps, a)
		}
		return nil
	})
	return snap, err
}

// Generation is the counter every change of apps or their keys bumps:
// one indexed row, cheap to poll.
func (s *Store) Generation(ctx context.Context) (int64, error) {
	var g int64
	if err := s.pool.QueryRow(ctx, sqlGeneration).Scan(&g); err != nil {
		return 0, fmt.Errorf("read apps generation: %w", err)
	}
	return g, nil
}

// Watch calls apply with a fresh Load each time the generation moves past
// since, checking every interval, until ctx ends. A failed check or load
// is logged and tried again at the next one: the worker keeps sending
// with what it has.
func (s *Store) Watch(ctx context.Context, every time.Duration, since int64, apply func(Snapshot)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g, err := s.Generation(ctx)
		if err == nil && g == since {
			continue
		}
		var snap Snapshot
		if err == nil {
			snap, err = s.Load(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Error("apps: reload failed; keeping the credentials loaded before", "err", err)
			}
			continue
		}
		since = snap.Generation
		apply(snap)
	}
}

// CheckKey verifies, without opening anything, that every stored secret
// was sealed with the configured key: the API checks it at start, so it
// never seals new credentials under a key the workers do not have. No key
// configured passes (the API then refuses writes of credentials).
func (s *Store) CheckKey(ctx context.Context) error {
	if s.cfg.Key == nil {
		return nil
	}
	rows, err := s.pool.Query(ctx, sqlSealingKeys)
	if err != nil {
		return fmt.Errorf("read sealed credentials: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read sealed credentials: %w", err)
	}
	for _, id := range ids {
		if id != s.cfg.Key.ID() {
			return fmt.Errorf("stored credentials are %w (key id %s), but %s is key id %s", secrets.ErrWrongKey, id, s.cfg.Key.Source, s.cfg.Key.ID())
		}
	}
	return nil
}

// List returns every app, public parts only.
func (s *Store) List(ctx context.Context) ([]App, error) {
	rows, err := read(ctx, s.pool, "", false)
	if err != nil {
		return nil, err
	}
	out := make([]App, 0, len(rows))
	for _, r := range rows {
		out = append(out, s.public(r))
	}
	return out, nil
}

// Get returns one app, public parts only; ErrNotFound if there is none.
func (s *Store) Get(ctx context.Context, name string) (App, error) {
	rows, err := read(ctx, s.pool, name, false)
	if err != nil {
		return App{}, err
	}
	return s.public(rows[0]), nil
}

// Add creates an app. A platform is given whole or not at all: VAPID
// needs a subject (a key is made if none is given), FCM the service
// account, APNs the key, key id, team id and at least one bundle id.
func (s *Store) Add(ctx context.Context, spec Spec) (App, error) {
	if err := CheckName(spec.Name); err != nil {
		return App{}, err
	}
	if spec.Name == Default {
		return App{}, ErrDefault
	}
	p, err := spec.parse()
	if err != nil {
		return App{}, err
	}
	if !spec.hasVAPID() && !spec.hasFCM() && !spec.hasAPNs() {
		return App{}, invalid("credentials", "an app needs credentials of at least one platform (VAPID, FCM or APNs)")
	}
	r := row{name: spec.Name}
	if spec.hasVAPID() {
		if spec.VAPIDSubject == "" {
			return App{}, invalid("vapid-subject", "required with a VAPID key: a mailto: or https: contact for the push services")
		}
		r.vapidSubject = spec.VAPIDSubject
	}
	if err := s.applyFCM(&r, spec, p); err != nil {
		return App{}, err
	}
	if err := s.applyAPNs(&r, spec, p); err != nil {
		return App{}, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sqlInsertApp, r.args()...)
		if err != nil {
			return fmt.Errorf("insert app %s: %w", r.name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %q", ErrExists, r.name)
		}
		if spec.hasVAPID() {
			return s.addKey(ctx, tx, r.name, p.vapid)
		}
		return nil
	})
	if err != nil {
		return App{}, err
	}
	return s.Get(ctx, spec.Name)
}

// Rotate changes an app's credentials. VAPID: a new key pair (given, or
// made with NewVAPIDKey) becomes the one new subscriptions get; the old
// ones stay, retired, and keep signing for the subscriptions made with
// them; the subject may change alone. FCM and APNs: what is given
// replaces what was (a new APNs key needs its key id). An app without a
// platform gains it as Add would.
func (s *Store) Rotate(ctx context.Context, name string, spec Spec) (App, error) {
	if name == Default {
		return App{}, ErrDefault
	}
	p, err := spec.parse()
	if err != nil {
		return App{}, err
	}
	if !spec.hasVAPID() && !spec.hasFCM() && !spec.hasAPNs() {
		return App{}, invalid("credentials", "nothing to rotate: give a new VAPID key (or ask for one), FCM credentials or an APNs key")
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := read(ctx, tx, name, true)
		if err != nil {
			return err
		}
		r := rows[0]
		newKey := spec.NewVAPIDKey || p.vapid != nil
		if spec.hasVAPID() {
			if len(r.keys) == 0 {
				newKey = true
			}
			if spec.VAPIDSubject != "" {
				r.vapidSubject = spec.VAPIDSubject
			}
			if r.vapidSubject == "" {
				return invalid("vapid-subject", "required with a VAPID key: a mailto: or https: contact for the push services")
			}
		}
		if err := s.applyFCM(&r, spec, p); err != nil {
			return err
		}
		if err := s.applyAPNs(&r, spec, p); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlUpdateApp, r.args()...); err != nil {
			return fmt.Errorf("update app %s: %w", name, err)
		}
		if newKey {
			if _, err := tx.Exec(ctx, sqlRetireKeys, name); err != nil {
				return fmt.Errorf("retire VAPID key of %s: %w", name, err)
			}
			return s.addKey(ctx, tx, name, p.vapid)
		}
		return nil
	})
	if err != nil {
		return App{}, err
	}
	return s.Get(ctx, name)
}

// Remove deletes an app and its keys; refused (ErrHasDevices) while any
// device belongs to it: their owners would silently stop getting pushes.
func (s *Store) Remove(ctx context.Context, name string) error {
	if name == Default {
		return ErrDefault
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := read(ctx, tx, name, true); err != nil {
			return err
		}
		var n int64
		if err := tx.QueryRow(ctx, sqlCountDevice, name).Scan(&n); err != nil {
			return fmt.Errorf("count devices of %s: %w", name, err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %q has %d device(s); they must be deleted first", ErrHasDevices, name, n)
		}
		_, err := tx.Exec(ctx, sqlDeleteApp, name)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" { // a device registered meanwhile
			return fmt.Errorf("%w: %q", ErrHasDevices, name)
		}
		if err != nil {
			return fmt.Errorf("delete app %s: %w", name, err)
		}
		return nil
	})
}

func (r row) args() []any {
	return []any{r.name, r.vapidSubject, r.fcmProject, r.fcmEmail, r.fcmURL, r.fcmSealed,
		r.apnsTeam, r.apnsKeyID, r.apnsEnv, r.apnsURL, r.apnsTopics, r.apnsSealed, r.fcmRate, r.apnsConns}
}

func (s *Store) seal(app, field string, b []byte) ([]byte, error) {
	if s.cfg.Key == nil {
		return nil, ErrNoSecretsKey
	}
	return s.cfg.Key.Seal(b, aad(app, field))
}

func (s *Store) addKey(ctx context.Context, tx pgx.Tx, app string, k *webpush.VAPIDKey) error {
	if k == nil {
		var err error
		if k, err = webpush.GenerateVAPIDKey(); err != nil {
			return err
		}
	}
	sealed, err := s.seal(app, vapidField(k.PublicKey()), []byte(k.PrivateKey()))
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sqlInsertKey, app, k.PublicKey(), sealed); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return invalid("vapid-private-key", "this key pair is already one of an app's keys: give a new one")
		}
		return fmt.Errorf("insert VAPID key of %s: %w", app, err)
	}
	return nil
}

func (s *Store) applyFCM(r *row, spec Spec, p parsed) error {
	if !spec.hasFCM() {
		return nil
	}
	if p.fcm == nil && r.fcmSealed == nil {
		return invalid("fcm-credentials", "required: the Firebase project's service-account JSON")
	}
	if p.fcm != nil {
		sealed, err := s.seal(r.name, "fcm_credentials", p.fcmJSON)
		if err != nil {
			return err
		}
		r.fcmSealed, r.fcmProject, r.fcmEmail = sealed, p.fcm.ProjectID, p.fcm.ClientEmail
	}
	if spec.FCMEndpoint != "" {
		r.fcmURL = strings.TrimSuffix(spec.FCMEndpoint, "/")
	}
	if spec.FCMRateLimit != 0 {
		r.fcmRate = spec.FCMRateLimit
	}
	return nil
}

func (s *Store) applyAPNs(r *row, spec Spec, p parsed) error {
	if !spec.hasAPNs() {
		return nil
	}
	if p.apnsKeyPEM == nil && r.apnsSealed == nil {
		return invalid("apns-key", "required: the .p8 signing key from Apple")
	}
	if p.apnsKeyPEM != nil {
		if spec.APNsKeyID == "" {
			return invalid("apns-key-id", "required with a key: the key's 10-character id")
		}
		sealed, err := s.seal(r.name, "apns_key", p.apnsKeyPEM)
		if err != nil {
			return err
		}
		r.apnsSealed = sealed
	} else if spec.APNsKeyID != "" {
		return invalid("apns-key-id", "a new key id needs its key (apns-key)")
	}
	if spec.APNsKeyID != "" {
		r.apnsKeyID = spec.APNsKeyID
	}
	if spec.APNsTeamID != "" {
		r.apnsTeam = spec.APNsTeamID
	}
	if len(spec.APNsTopics) > 0 {
		r.apnsTopics = slices.Clone(spec.APNsTopics)
	}
	if spec.APNsEnvironment != "" {
		r.apnsEnv = spec.APNsEnvironment
	}
	if r.apnsEnv == "" {
		r.apnsEnv = "production"
	}
	if spec.APNsEndpoint != "" {
		r.apnsURL, _ = apns.ParseEndpoint(spec.APNsEndpoint)
	}
	if spec.APNsConnections != 0 {
		r.apnsConns = spec.APNsConnections
	}
	switch {
	case r.apnsTeam == "":
		return invalid("apns-team-id", "required with a key: the developer team id")
	case len(r.apnsTopics) == 0:
		return invalid("apns-topics", "required: the bundle ids this app's devices may name, comma-separated")
	}
	return nil
}
