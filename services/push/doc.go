// Package push is the push stage of notify: workers that form the
// notify-push consumer group on outbox.event.push, turn each PushCommand into
// encrypted Web Pushes through the webpush delivery engine, and record every
// outcome in push_deliveries before the command's offset is committed. The
// per-event accounting read from those rows (target = delivered + gone +
// failed + pending, and its verification) is services/eventstatus.
//
// # One command
//
// A fresh command (from the fan-out) names an event and a range of students
// [FirstUser, LastUser]. Its recipients are the subscriptions of the
// students in that range who were notified of the event (joined to
// notifications), minus every subscription that already has a
// push_deliveries row for the event — on a redelivery after a crash or a
// replay, those were handled. What is sent is the event's: its fanout_runs
// row, read once per event and kept (content.go), replaces whatever the
// command claims, and a command of an event without a run is
// dead-lettered. The payload (title, url, event_id, course_id) is encoded
// once. Sends run concurrently; outcomes are written in batches
// (one multi-row upsert per BatchSize outcomes, one round trip, together
// with deleting gone subscriptions and queueing retries, all in one
// transaction). The handler returns — and the consumer may commit — only
// when every recipient is recorded.
//
// # Platforms
//
// Recipients are devices of every platform (push_subscriptions.platform):
// webpush devices go through Config.Sender, fcm and apns devices through
// Config.FCM and Config.APNs (further platforms: Config.Providers),
// with the same payload fields (the event id is FCM's collapse_key and
// APNs' collapse id). Outcomes of every platform share one push_deliveries
// key (event_id, subscription_id), one batch, gone deletion, retries and
// dead letters. A platform whose provider is nil (no credentials) is not
// sent to: its devices are recorded failed with reason
// provider_not_configured, unsent, not counted toward disabling them, and
// counted in notify_push_provider_not_configured_total. Other faults of
// the deployment fail every device of a platform alike and are not
// counted toward disabling devices either: the FCM token endpoint refusing
// the credentials, the dial guard refusing the push service's address, an
// APNs topic missing or not the key's (deploymentsFault in batch.go).
//
// # Apps
//
// Every device belongs to an app (push_subscriptions.app, services/apps).
// The default app's devices go through the providers above, the
// environment's; every other app's through Config.Apps (apps.go): that
// app's providers, built from its stored credentials by the same
// constructors — one Web Push sender per VAPID key, so a subscription is
// signed with the key it was made with, retired or not — rebuilt when the
// app's version moves and swapped atomically, the replaced ones closed
// after a grace period. A device whose app the worker lacks, or has no
// credentials for its platform, is recorded provider_not_configured
// naming the app, like a platform without a provider.
//
// Copies of a command — the connector re-emits after a crash, an early
// retry re-queued just before a crash — land on the same partition and so on
// the same worker, which runs them one after the other: the later copy finds
// everything recorded and sends nothing.
//
// # Send slots and duplicates
//
// A send holds one of MaxInFlight slots from the moment it starts until its
// outcome is committed to push_deliveries, not merely until the push service
// answers (a retryable outcome gives its slot back at once: it will be sent
// again anyway). Those are exactly the sends a kill -9 can repeat (the next owner
// of the partition redoes the command and skips what was recorded), so
// pushes delivered twice after a crash are at most MaxInFlight per worker.
// A failed send whose slot went back early (a retryable answer, or a 5xx on
// the last attempt waiting for its dead letter) can be sent again beyond
// that bound; it reached nobody the first time.
//
// One push-service origin holds at most MaxInFlightPerOrigin of the slots.
// A command's recipients whose origin is at that budget queue per origin
// while the others go ahead, so an origin that answers slowly or never (a
// tar-pit endpoint, an outage) cannot take every slot from the rest.
//
// # Fair share between apps
//
// The slots go to the apps whose sends wait for one in turn (fair.go), so
// a hot app's broadcast — many commands, each waiting for the next slot —
// cannot take every slot that frees from another app's send. Another
// app's devices are budgeted apart from the default app's (appBudget in
// apps.go): its Web Push origins, its FCM project, its APNs team. An FCM
// project's budget is also paced at its rate limit (the app's, else
// Config.FCMRateLimit) by a token bucket (budget.go); its recipients over
// the rate wait in their command for the next token while the others go
// ahead.
//
// Commands reach the worker in their partition's order, so another
// event's commands produced after a broadcast's sit behind the
// broadcast's on their partitions. The consumer therefore hands the
// worker ReadAhead commands more than it has command slots; they wait,
// having loaded and sent nothing, and the slots that load and send go to
// the waiting commands' events in turn (Worker.admit, the same fairSlots
// keyed by event): a small event's command, once read, starts at the next
// slot or the one after, not after the broadcast's waiting commands. A
// command carries no app (its devices may be of several), so the turn is
// per event.
//
// # Disabled subscriptions
//
// Each subscription counts the events in a row whose outcome for it was
// failed (out of attempts, or refused for good for a reason that is the
// subscription's — not a VAPID rejection or an oversized payload); a
// delivery resets it. At DisableAfterFailures it is disabled
// (push_subscriptions.disabled_at) and counted; later events record it
// failed, "subscription disabled", without a request, so their accounting
// still adds up.
//
// # Retries
//
// A retryable outcome (429, 5xx, timeout) is recorded 'retrying' with its
// attempt count, and in the same transaction a retry command goes into the
// outbox: same event and range, Attempt+1, the subscription ids, and
// NotBefore = now + max(exponential backoff with jitter, Retry-After). A
// retry command sends only to its subscriptions still 'retrying' at exactly
// the previous attempt, so a duplicated retry sends nothing twice. After
// MaxAttempts the subscriptions are dead-lettered (a max_attempts record on
// notify.push.dlq naming them, produced before they are recorded 'failed').
// A send the delivery engine refused because the push service's Retry-After
// had not passed was never made: it is re-queued for the same attempt.
//
// A retry command usually arrives before its NotBefore. The worker holds it
// in memory (it occupies a command slot, not a send slot; other records of
// the partition keep flowing, only that partition's commit waits) for up to
// HoldMax, then sends; one due later is held HoldMax and re-queued through
// the outbox unchanged. So a waiting retry never blocks fresh commands and
// never holds a partition's commits for longer than HoldMax, and a far-off
// Retry-After costs one outbox row per HoldMax rather than a busy loop.
// Only the CDC connector produces to outbox topics; the worker itself
// produces only to the DLQ topic.
//
// # Expiry
//
// A command carrying the event's expires_at (fan-out commands, their
// retries and dead letters) sends nothing after it: each device still to
// send is recorded 'expired' without a request, and a retry due after the
// expiry is held only until it. What is sent before then gets the
// remaining lifetime as its time-to-live on every platform. See expiry.go.
//
// # Pause and cancel
//
// The event's control state (package eventcontrol) is checked when a
// command arrives, again before it loads its recipients, and before every
// send, through a per-worker cache refreshed every Config.StateRefresh: a
// paused event's command is parked in Postgres and committed (whatever it
// had sent is recorded first), never held; a cancelled event's devices not
// yet sent are recorded 'cancelled' by the worker, so a device on the wire
// while the cancel commits keeps the outcome of its send. See control.go.
//
// # Files
//
// worker.go is the lifecycle (startstop) and one command's flow; hold.go
// holds early retries; deliver.go sends a command's recipients within the
// slots and budgets; batch.go collects outcomes and records them (retries,
// dead letters of exhausted subscriptions); deadletter.go produces to the
// DLQ; lag.go publishes the group's lag; payload.go encodes the message;
// store.go and sql.go are the database side, all of the worker's SQL in
// sql.go.
//
// # Rebalancing and stopping
//
// The group uses the cooperative-sticky balancer (streams.Consumer). On a
// revoke or a lost partition (a broker restart), commands of the partition
// start no new send (streams.PartitionReleased); sends on the wire finish
// and are recorded, and the command returns uncommitted for the next owner,
// which sends only what is not recorded. The partition is handed back when
// its commands are done or after RevokeTimeout; a command still running
// then is not cancelled, it finishes in the background. Commands of the
// partition that have not started — waiting for a command slot, for a
// copy of themselves, or held as early retries — give up at once
// (errReleased) and stay uncommitted for the next owner, so the revoke
// waits only for the commands that are sending. Stop hands
// back held retries (re-queued) and commands that have not started, and lets
// commands that are sending finish. The worker follows services/startstop:
// Start once (a second Start fails with ErrAlreadyStarted), the end of the
// Start context begins the same soft stop as Stop, and a second Stop
// returns the first one's result.
package push
