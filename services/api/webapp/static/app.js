// notify's reference page: subscribe this browser to push, show the inbox.
// Plain JavaScript, no build step. See services/api/webapp (package doc).
'use strict';

const params = new URLSearchParams(location.search);
// report: where the page and its service worker tell what they do (JSON
// POSTs) and ask what to do next (GET …/command) — the project's tests use
// it to drive a real browser. Unset in normal use.
const report = params.get('report') || '';
let token = params.get('token') || localStorage.getItem('notify.token') || '';
if (params.get('token')) localStorage.setItem('notify.token', token);

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withTimeout(promise, ms, what) {
  return Promise.race([promise, sleep(ms).then(() => { throw new Error(what + ' timed out'); })]);
}

async function tell(obj) {
  if (!report) return;
  try {
    // text/plain keeps it a simple request: no CORS preflight.
    await fetch(report + '/report', { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: JSON.stringify(Object.assign({ from: 'page' }, obj)) });
  } catch (e) { /* the reporter is optional */ }
}

function say(message, isError) {
  const el = $('status');
  el.textContent = message;
  el.className = isError ? 'error' : '';
  tell({ type: isError ? 'error' : 'status', message });
}

async function api(path, opts = {}) {
  const headers = Object.assign({ Authorization: 'Bearer ' + token }, opts.headers || {});
  const r = await fetch(path, Object.assign({}, opts, { headers }));
  let body = null;
  try { body = await r.json(); } catch (e) { /* 204 and friends */ }
  if (!r.ok) {
    const e = body && body.error;
    throw new Error(e ? `${e.message} (${e.code}, HTTP ${r.status})` : `HTTP ${r.status} from ${path}`);
  }
  return body;
}

function base64urlToBytes(s) {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (s.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

function sameKey(a, b) {
  if (!a || a.byteLength !== b.byteLength) return false;
  const x = new Uint8Array(a);
  return x.every((v, i) => v === b[i]);
}

async function registration() {
  const script = 'sw.js' + (report ? '?report=' + encodeURIComponent(report) : '');
  await navigator.serviceWorker.register(script, { scope: './' });
  return navigator.serviceWorker.ready;
}

// subscribe asks for permission, subscribes with the API's VAPID key and
// posts the subscription. A browser's push service may need a few seconds
// after start before it answers (Firefox drops earlier requests), so the
// browser calls are retried with a timeout each.
async function subscribe() {
  if (!token) throw new Error('enter an access token first');
  if (!('serviceWorker' in navigator) || !('PushManager' in window)) throw new Error('this browser has no Push API');
  const permission = await Notification.requestPermission();
  if (permission !== 'granted') throw new Error('notifications are blocked for this site: allow them in the browser\'s site settings, then try again');
  const reg = await registration();
  const { public_key: publicKey } = await api('/v1/vapid-public-key');
  const key = base64urlToBytes(publicKey);
  let sub = null;
  for (let attempt = 1; ; attempt++) {
    try {
      sub = await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
      if (sub && !sameKey(sub.options.applicationServerKey, key)) {
        await sub.unsubscribe(); // made for another server key: useless now
        sub = null;
      }
      if (!sub) sub = await withTimeout(reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }), 10000, 'subscribe');
      break;
    } catch (e) {
      if (attempt >= 20) throw e;
      say(`waiting for the browser's push service (${e.message}), attempt ${attempt}…`);
      await sleep(1000);
    }
  }
  const json = sub.toJSON();
  await api('/v1/me/push-subscriptions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ endpoint: json.endpoint, keys: json.keys }),
  });
  say('Push is on for this browser.');
  tell({ type: 'subscribed', endpoint: json.endpoint });
  return sub;
}

// unsubscribe turns push off in the browser and, unless browserOnly, at the
// API too (browserOnly leaves the stale subscription for the push worker
// to discover through the push service's 410).
async function unsubscribe(browserOnly) {
  const reg = await registration();
  const sub = await withTimeout(reg.pushManager.getSubscription(), 5000, 'getSubscription');
  if (!sub) { say('Push is already off.'); return; }
  const endpoint = sub.endpoint;
  await sub.unsubscribe();
  if (!browserOnly) await api('/v1/me/push-subscriptions?endpoint=' + encodeURIComponent(endpoint), { method: 'DELETE' });
  say('Push is off for this browser.');
  tell({ type: 'unsubscribed', endpoint, browser_only: !!browserOnly });
}

let cursor = '';
async function loadInbox(more) {
  if (!token) return;
  const q = new URLSearchParams({ limit: '20' });
  if (more && cursor) q.set('cursor', cursor);
  const page = await api('/v1/me/notifications?' + q);
  const list = $('inbox');
  if (!more) list.textContent = '';
  for (const item of page.items) {
    const li = document.createElement('li');
    li.className = item.read_at ? '' : 'unread';
    const left = document.createElement('div');
    const title = document.createElement(item.url ? 'a' : 'span');
    title.className = 'title';
    title.textContent = item.title;
    if (item.url) title.href = item.url;
    const when = document.createElement('time');
    when.dateTime = item.published_at;
    when.textContent = new Date(item.published_at).toLocaleString();
    when.className = 'muted';
    left.append(title, document.createElement('br'), when);
    li.append(left);
    if (!item.read_at) {
      const b = document.createElement('button');
      b.textContent = 'Mark read';
      b.onclick = () => api(`/v1/me/notifications/${item.event_id}/read`, { method: 'POST' }).then(() => loadInbox(false)).catch((e) => say(e.message, true));
      li.append(b);
    }
    list.append(li);
  }
  cursor = page.next_cursor || '';
  $('more-wrap').hidden = !cursor;
  return page;
}

// Commands a test harness can ask for through report (see package doc).
async function runCommand(cmd) {
  const reg = await registration();
  switch (cmd.action) {
    case 'notifications': {
      const shown = await reg.getNotifications(cmd.tag ? { tag: cmd.tag } : {});
      return { notifications: shown.map((n) => ({ title: n.title, body: n.body, tag: n.tag })) };
    }
    case 'unsubscribe-browser': await unsubscribe(true); return {};
    case 'unsubscribe': await unsubscribe(false); return {};
    case 'subscribe': await subscribe(); return {};
    case 'inbox': return { inbox: await loadInbox(false) };
    case 'close-notifications': {
      for (const n of await reg.getNotifications()) n.close();
      return {};
    }
    default: throw new Error('unknown command ' + cmd.action);
  }
}

async function commandLoop() {
  for (;;) {
    try {
      const r = await fetch(report + '/command');
      const cmd = await r.json();
      if (cmd && cmd.action && cmd.action !== 'none') {
        try {
          tell(Object.assign({ type: 'result', action: cmd.action, id: cmd.id, ok: true }, await runCommand(cmd)));
        } catch (e) {
          tell({ type: 'result', action: cmd.action, id: cmd.id, ok: false, error: e.message });
        }
        continue;
      }
    } catch (e) { /* harness not up yet */ }
    await sleep(250);
  }
}

function wire() {
  $('token').value = token;
  $('token').onchange = () => { token = $('token').value.trim(); localStorage.setItem('notify.token', token); loadInbox(false).catch((e) => say(e.message, true)); };
  $('subscribe').onclick = () => subscribe().catch((e) => say(e.message, true));
  $('unsubscribe').onclick = () => unsubscribe(false).catch((e) => say(e.message, true));
  $('refresh').onclick = () => loadInbox(false).catch((e) => say(e.message, true));
  $('more').onclick = () => loadInbox(true).catch((e) => say(e.message, true));
  navigator.serviceWorker.addEventListener('message', (ev) => { if (ev.data && ev.data.type === 'push') loadInbox(false).catch(() => {}); });
}

(async function main() {
  wire();
  tell({ type: 'loaded', user_agent: navigator.userAgent });
  if (!token) { say('Enter your access token, then turn on push.'); return; }
  try {
    await loadInbox(false);
    if (params.get('subscribe') === '1' || Notification.permission === 'granted') await subscribe();
    else say('Turn on push to be notified on this browser.');
  } catch (e) {
    say(e.message, true);
  }
  if (report) commandLoop();
})();
