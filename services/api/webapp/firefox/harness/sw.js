// The test harness in the service worker: package firefox's own server
// serves the shipped sw.js with this imported first (never shipped). It
// wraps the worker's push handler to report, after the handler is done,
// the decrypted payload and how many notifications carry its tag — to the
// worker's own origin, the only one its policy allows — and, asked by the
// page's harness, runs the worker's notificationclick handler on a shown
// notification, as a user's click would.
'use strict';
(function () {
  function report(obj) {
    return fetch('/harness/report', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(Object.assign({ from: 'sw' }, obj)) }).catch(() => {});
  }
  const add = self.addEventListener.bind(self);
  let onClick = null;
  add('message', (ev) => {
    if (!ev.data || ev.data.harness !== 'click') return;
    const reply = (v) => ev.ports[0].postMessage(v);
    ev.waitUntil((async () => {
      const [n] = await self.registration.getNotifications({ tag: ev.data.tag });
      if (!n || !onClick) return reply({ ok: false, error: n ? 'no notificationclick handler' : 'no notification tagged ' + ev.data.tag });
      const pending = [];
      onClick.call(self, { notification: n, action: '', waitUntil: (p) => pending.push(p) });
      await Promise.allSettled(pending);
      reply({ ok: true });
    })());
  });
  self.addEventListener = function (type, listener, options) {
    if (type === 'notificationclick') onClick = listener;
    if (type !== 'push') return add(type, listener, options);
    return add(type, (event) => {
      const pending = [];
      const waitUntil = event.waitUntil.bind(event);
      event.waitUntil = (p) => { pending.push(p); waitUntil(p); };
      let raw = '';
      try { raw = event.data ? event.data.text() : ''; } catch (e) { /* no payload */ }
      listener.call(self, event);
      waitUntil((async () => {
        const settled = await Promise.allSettled(pending);
        let p = null;
        try { p = JSON.parse(raw); } catch (e) { /* not JSON */ }
        if (!p || typeof p !== 'object' || Array.isArray(p)) p = null;
        const recognised = !!p && typeof p.title === 'string' && typeof p.event_id === 'string';
        const shown = recognised ? await self.registration.getNotifications({ tag: p.event_id }) : [];
        const origins = Array.from(new Set(performance.getEntriesByType('resource').map((e) => new URL(e.name).origin)));
        await report({
          type: 'push', raw, payload: p || {}, shown_with_tag: shown.length, origins,
          ok: recognised && shown.length > 0 && settled.every((s) => s.status === 'fulfilled'),
          error: settled.filter((s) => s.status === 'rejected').map((s) => String(s.reason)).join('; '),
        });
      })());
    }, options);
  };
})();
