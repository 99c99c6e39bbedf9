// Package apps is the registry of the products one notify serves. An app
// has a name and, per platform, the credentials its pushes are sent with:
// Web Push (VAPID key pairs and a subject), FCM (a service account, which
// names its Firebase project) and APNs (team id, key id, .p8 key, the
// bundle ids its devices may name, sandbox or production). Every device
// belongs to one app (push_subscriptions.app), and a Web Push
// subscription remembers the VAPID key it subscribed with, so rotating an
// app's key changes what new subscriptions get and nothing for old ones.
//
// The app "default" is the one the environment defines
// (NOTIFY_VAPID_PRIVATE_KEY, NOTIFY_FCM_CREDENTIALS, NOTIFY_APNS_*): its
// row exists so devices can reference it, its credentials are never
// stored, and it cannot be added, rotated or removed here. Everything
// written before apps existed belongs to it.
//
// Private parts are sealed with package secrets before they reach the
// database and opened only by Store.Load, for the push workers; every
// other read (List, Get: `notify apps show`, GET /v1/apps) returns public
// parts only, and the types that hold private parts print, log and
// marshal as "[redacted]".
//
// Workers follow changes without a restart: every change of apps or
// their keys bumps one counter (apps_generation, by trigger, whoever
// writes) and notifies channel notify_apps; Store.Generation reads it and
// Store.Watch reloads when it moved.
package apps
