// Package receipts counts what students do with a notification once it
// reached them: the service worker reports that it was shown and that it
// was clicked, the inbox that it was read. The counts complete an event's
// funnel — target → delivered → shown → clicked — in `notify status`
// (services/eventstatus) and reach other teams on outbox.event.lifecycle
// as one ReceiptsCounted record per event every few seconds (the Flusher),
// never one record per student.
//
// # Tokens
//
// A browser posting a receipt has no login: its service worker runs
// without the page's session, possibly long after the tab closed. The push
// worker therefore puts a receipt token in each device's push payload
// ("receipt"), an HMAC-SHA256 over the student, the event, the device's
// platform and an expiry under a server secret (NOTIFY_RECEIPT_KEY, shared
// by the push workers, which mint, and the API, which verifies). Only
// notify can mint one, a token names the one student and event it counts
// for, and it says nothing a reader of the payload did not know: the
// payload was encrypted to that student's device. See Token for the
// layout.
//
// # Counting once
//
// A receipt is counted once per (event, student, kind): the first sets
// notifications.shown_at, clicked_at or read_at (schema migration 0025)
// and queues one receipt_pending row in that transaction; a repeat — a
// replayed request, the same notification shown on two devices — changes
// nothing. The platform counted is that of the first receipt of the kind.
// Inbox reads count under the platform "inbox".
package receipts
