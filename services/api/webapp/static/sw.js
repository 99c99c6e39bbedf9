// notify's service worker: shows each push, one notification per event.
// A push's payload is notify's JSON: {"title","event_id","course_id"?,"url"?,
// "body"?,"type"?,"data"?,"collapse_key"?}.
// "receipt" is the push's receipt token: with it the worker reports the
// notification shown and clicked to its own origin (no login needed; the
// token counts for this push's student and event only). It reads nothing
// from its own URL and sends nothing else anywhere: the page's open
// windows get a message (to refresh the inbox), and that is all.
'use strict';

// receipt reports kind ('shown', 'clicked') of an event. Best effort: a
// lost receipt costs a count, never the notification.
function receipt(eventId, token, kind) {
  if (typeof token !== 'string' || token === '') return Promise.resolve();
  return fetch('/v1/me/notifications/' + encodeURIComponent(eventId) + '/receipts', {
    method: 'POST',
    headers: { Authorization: 'Receipt ' + token, 'Content-Type': 'application/json' },
    body: JSON.stringify({ kind }),
  }).catch(() => {});
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  event.waitUntil((async () => {
    let p = null;
    try {
      p = JSON.parse(event.data ? event.data.text() : '');
    } catch (e) { /* not JSON */ }
    if (!p || typeof p.title !== 'string' || typeof p.event_id !== 'string') {
      // userVisibleOnly pushes must show something; say what we got.
      await self.registration.showNotification('New notification', { tag: 'notify-unrecognised' });
      return;
    }
    // tag = the collapse key, else the event id: a second push of the
    // same event (or a newer one of the same key) replaces the first
    // notification instead of adding one (renotify false: silently).
    const collapse = typeof p.collapse_key === 'string' && p.collapse_key !== '' ? p.collapse_key : p.event_id;
    await self.registration.showNotification(p.title, {
      body: typeof p.body === 'string' && p.body !== '' ? p.body : (p.type ? '' : 'New course material'),
      tag: collapse,
      renotify: false,
      data: { url: p.url || '', event_id: p.event_id, course_id: p.course_id || '', type: p.type || '', data: p.data || null, receipt: p.receipt || '' },
    });
    await receipt(p.event_id, p.receipt, 'shown');
    for (const c of await self.clients.matchAll({ type: 'window' })) c.postMessage({ type: 'push', event_id: p.event_id });
  })());
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const d = event.notification.data || {};
  // The receipt goes whether or not the window opens.
  event.waitUntil(Promise.allSettled([receipt(d.event_id, d.receipt, 'clicked'), self.clients.openWindow(d.url || self.registration.scope)]));
});
