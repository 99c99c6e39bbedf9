// Package notifications is the one definition of a notification request —
// any team's notification, of any type, to a course's students or to a
// list of users — its validation and its creation. POST /v1/notifications
// (services/api) and the CloudEvents intake both decode with Decode, and
// write with Create inside their own transaction, so the two can never
// disagree on what a notification is.
//
// Create writes two rows: notification_events (who sent it, to whom: a
// user list is stored there, mapped, sorted and distinct) and one outbox
// row, NotificationCreated on outbox.event.notification, with the content.
// From there an event is an event: the fan-out planner plans it like a
// published material (fanout_runs, with its type), the slice worker walks
// the course's enrollments or the event's user list, and the push workers
// deliver it. Materials published through POST /v1/courses/{id}/materials
// are events of type "material.published", which is reserved to that route.
package notifications
