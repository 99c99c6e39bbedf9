// notify's service worker: shows each push, one notification per event.
// A push's payload is notify's JSON: {"title","event_id","course_id","url"?}.
'use strict';

const report = new URL(self.location.href).searchParams.get('report') || '';

async function tell(obj) {
  if (!report) return;
  try {
    await fetch(report + '/report', { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify(Object.assign({ from: 'sw' }, obj)) });
  } catch (e) { /* the reporter is optional */ }
}

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  event.waitUntil((async () => {
    let raw = '';
    let p = null;
    try {
      raw = event.data ? event.data.text() : '';
      p = JSON.parse(raw);
    } catch (e) { /* not JSON */ }
    if (!p || typeof p.title !== 'string' || typeof p.event_id !== 'string') {
      // userVisibleOnly pushes must show something; say what we got.
      await self.registration.showNotification('New notification', { tag: 'notify-unrecognised' });
      await tell({ type: 'push', ok: false, raw });
      return;
    }
    // tag = event id: a second push of the same event replaces the first
    // notification instead of adding one (renotify false: silently).
    await self.registration.showNotification(p.title, {
      body: p.body || 'New course material',
      tag: p.event_id,
      renotify: false,
      data: { url: p.url || '', event_id: p.event_id, course_id: p.course_id || '' },
    });
    const shown = await self.registration.getNotifications({ tag: p.event_id });
    for (const c of await self.clients.matchAll({ type: 'window' })) c.postMessage({ type: 'push', event_id: p.event_id });
    await tell({ type: 'push', ok: true, raw, payload: p, shown_with_tag: shown.length });
  })());
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const url = (event.notification.data && event.notification.data.url) || self.registration.scope;
  event.waitUntil(self.clients.openWindow(url));
});
