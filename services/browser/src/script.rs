//! The functions a session runs in the page. Each is a JS function expression
//! called with JSON arguments; each returns JSON.

/// `true` when `selector` matches a rendered element, else `null` (so waiting
/// goes on).
pub const VISIBLE: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (!el) return null;
  const r = el.getBoundingClientRect();
  const s = getComputedStyle(el);
  return (r.width > 0 || r.height > 0) && s.visibility !== 'hidden' && s.display !== 'none' ? true : null;
}"#;

pub const HAS_TEXT: &str =
    r#"(text) => (document.body && document.body.innerText.includes(text)) ? true : null"#;

pub const CLEAR_AND_FOCUS: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const editable = el.isContentEditable || el instanceof HTMLTextAreaElement ||
    (el instanceof HTMLInputElement && !['checkbox','radio','submit','button','file','image','reset','hidden'].includes(el.type));
  if (!editable) return false;
  el.focus();
  if (el.isContentEditable) { el.textContent = ''; } else { el.value = ''; }
  el.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
}"#;

pub const CHANGED: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (el) el.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}"#;

pub const SELECT: &str = r#"(sel, want) => {
  const el = document.querySelector(sel);
  if (!(el instanceof HTMLSelectElement)) return 'not a <select>';
  const opt = Array.from(el.options).find(o => o.value === want || o.label.trim() === want || o.text.trim() === want);
  if (!opt) return 'no option with value or label ' + JSON.stringify(want) + ' (options: ' + Array.from(el.options).map(o => JSON.stringify(o.label.trim())).join(', ') + ')';
  el.value = opt.value;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return 'ok';
}"#;

pub const SCROLL: &str = r#"() => { window.scrollBy(0, window.innerHeight); return true; }"#;

pub const NEXT_FRAME: &str =
    r#"() => new Promise(r => requestAnimationFrame(() => setTimeout(() => r(true), 0)))"#;

pub const SCROLL_UNTIL: &str = r#"(sel) => {
  if (document.querySelector(sel)) return true;
  window.scrollBy(0, window.innerHeight);
  return null;
}"#;

pub const HTML: &str = r#"() => '<!DOCTYPE html>' + document.documentElement.outerHTML"#;

pub const MARK: &str = r#"() => {
  if (!window.__trawlMark) window.__trawlMark = Math.random().toString(36).slice(2) + Date.now();
  return window.__trawlMark;
}"#;

pub const FINGERPRINT: &str =
    r#"(sel) => Array.from(document.querySelectorAll(sel)).map(e => e.outerHTML).join('\n')"#;

/// `true` once the marked page is gone and the new one loaded, or the marked page
/// changed what `sel` matches; and `sel` matches.
pub const CHANGED_SINCE: &str = r#"(mark, sel, before) => {
  if (document.readyState !== 'complete') return null;
  if (!document.querySelector(sel)) return null;
  const navigated = window.__trawlMark !== mark;
  const now = Array.from(document.querySelectorAll(sel)).map(e => e.outerHTML).join('\n');
  return (navigated || now !== before) ? true : null;
}"#;

pub const MATCHES_ONE: &str = r#"(sel) => { try { return document.querySelectorAll(sel).length === 1; } catch (e) { return false; } }"#;

pub const TEXT_OF: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (!el) return null;
  if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement) return el.value;
  if (el instanceof HTMLSelectElement) return el.selectedOptions.length ? el.selectedOptions[0].label.trim() : '';
  return (el.innerText || el.textContent || '').replace(/\s+/g, ' ').trim();
}"#;

pub const DESCRIBE: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (!el) return null;
  const t = el.tagName.toLowerCase();
  return el instanceof HTMLInputElement ? t + ':' + el.type : t;
}"#;

/// Numbers the visible elements a model may pick (`data-trawl-ref`, kept across
/// snapshots of one page) and lists them, one line each, up to `max` bytes.
pub const SNAPSHOT: &str = r#"(max) => {
  const SKIP = new Set(['SCRIPT','STYLE','NOSCRIPT','TEMPLATE','SVG','HEAD','META','LINK','IFRAME']);
  const INTERACTIVE = new Set(['A','BUTTON','INPUT','SELECT','TEXTAREA','OPTION','SUMMARY','LABEL']);
  let next = (window.__trawlRefs || 0);
  const lines = [];
  let size = 0, count = 0, truncated = false;
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return (r.width > 0 || r.height > 0 || el.tagName === 'OPTION') && s.visibility !== 'hidden' && s.display !== 'none';
  };
  const ownText = (el) => Array.from(el.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join(' ').replace(/\s+/g, ' ').trim();
  const quote = (s) => JSON.stringify(s.length > 120 ? s.slice(0, 117) + '...' : s);
  const walk = (el) => {
    if (truncated || SKIP.has(el.tagName)) return;
    if (el.tagName !== 'OPTION' && !visible(el)) return;
    const role = el.getAttribute('role');
    const text = ownText(el);
    const interactive = INTERACTIVE.has(el.tagName) || role || el.hasAttribute('onclick') || el.tabIndex >= 0 && el.tagName !== 'BODY' && el.tagName !== 'HTML';
    if (interactive || text) {
      let ref = el.getAttribute('data-trawl-ref');
      if (!ref) { ref = 'e' + (++next); el.setAttribute('data-trawl-ref', ref); }
      let line = '[' + ref + '] ' + (role || el.tagName.toLowerCase());
      if (el instanceof HTMLInputElement) line += ' type=' + el.type;
      const label = el.getAttribute('aria-label') || el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('alt');
      if (label) line += ' label=' + quote(label);
      if (el.getAttribute('name')) line += ' name=' + quote(el.getAttribute('name'));
      if ((el instanceof HTMLInputElement && el.type !== 'password') || el instanceof HTMLTextAreaElement) { if (el.value) line += ' value=' + quote(el.value); }
      if (el instanceof HTMLInputElement && (el.type === 'checkbox' || el.type === 'radio')) line += el.checked ? ' checked' : '';
      if (el instanceof HTMLOptionElement && el.selected) line += ' selected';
      if (el instanceof HTMLAnchorElement && el.getAttribute('href')) line += ' href=' + quote(el.getAttribute('href'));
      if (el.disabled) line += ' disabled';
      if (text) line += ' ' + quote(text);
      if (size + line.length + 1 > max) { truncated = true; return; }
      lines.push(line); size += line.length + 1; count++;
    }
    for (const c of el.children) walk(c);
  };
  if (document.body) walk(document.body);
  window.__trawlRefs = next;
  return {url: location.href, title: document.title, text: lines.join('\n'), elements: count, truncated};
}"#;

/// A stable selector for the element numbered `ref`: a unique id, a unique
/// test id / name / label attribute, else its path of tag:nth-of-type steps up
/// to the nearest ancestor with a unique id.
pub const SELECTOR_FOR: &str = r#"(ref) => {
  const el = document.querySelector('[data-trawl-ref="' + ref + '"]');
  if (!el) return null;
  const unique = (s) => { try { return document.querySelectorAll(s).length === 1; } catch (e) { return false; } };
  const tag = el.tagName.toLowerCase();
  if (el.id && unique('#' + CSS.escape(el.id))) return '#' + CSS.escape(el.id);
  for (const a of ['data-testid', 'data-test', 'name', 'aria-label']) {
    const v = el.getAttribute(a);
    if (v) {
      const s = tag + '[' + a + '="' + v.replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"]';
      if (unique(s)) return s;
    }
  }
  if (el instanceof HTMLOptionElement && el.parentElement) {
    const v = el.getAttribute('value');
    if (v !== null) {
      const parent = el.closest('select');
      if (parent && parent.id) {
        const s = '#' + CSS.escape(parent.id) + ' > option[value="' + v.replace(/"/g, '\\"') + '"]';
        if (unique(s)) return s;
      }
    }
  }
  const parts = [];
  let e = el;
  while (e && e.nodeType === 1 && e !== document.body && e !== document.documentElement) {
    if (e !== el && e.id && unique('#' + CSS.escape(e.id))) { parts.unshift('#' + CSS.escape(e.id)); break; }
    let i = 1, s = e;
    while ((s = s.previousElementSibling)) if (s.tagName === e.tagName) i++;
    parts.unshift(e.tagName.toLowerCase() + ':nth-of-type(' + i + ')');
    e = e.parentElement;
  }
  if (e === document.body) parts.unshift('body');
  return parts.join(' > ');
}"#;

/// Chooses the option `sel` matches in its select: `true`, `false` when it is not
/// an option of a select, `null` while nothing matches.
pub const CHOOSE_OPTION: &str = r#"(sel) => {
  const el = document.querySelector(sel);
  if (!el) return null;
  const select = el instanceof HTMLOptionElement ? el.closest('select') : null;
  if (!select) return false;
  select.value = el.value;
  select.dispatchEvent(new Event('input', {bubbles: true}));
  select.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}"#;

/// Covers, with black boxes on a layer over the page, every field whose value
/// holds one of `values` or that `selectors` match, and every element whose
/// text holds one (the innermost such element). The number of boxes.
pub const MASK: &str = r#"(values, selectors) => {
  const hit = (t) => !!t && values.some(v => t.includes(v));
  const rects = [];
  const field = (el) => el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement || el instanceof HTMLSelectElement;
  for (const sel of selectors) {
    try { document.querySelectorAll(sel).forEach(el => rects.push(el.getBoundingClientRect())); } catch (e) {}
  }
  for (const el of document.querySelectorAll('body *')) {
    if (el.id === '__trawl_mask') continue;
    if (field(el)) { if (hit(el.value)) rects.push(el.getBoundingClientRect()); continue; }
    if (!hit(el.textContent)) continue;
    if (Array.from(el.children).some(c => hit(c.textContent))) continue;
    rects.push(el.getBoundingClientRect());
  }
  const old = document.getElementById('__trawl_mask');
  if (old) old.remove();
  const layer = document.createElement('div');
  layer.id = '__trawl_mask';
  layer.setAttribute('style', 'position:fixed;left:0;top:0;width:0;height:0;overflow:visible;pointer-events:none;z-index:2147483647');
  for (const r of rects) {
    if (r.width <= 0 && r.height <= 0) continue;
    const b = document.createElement('div');
    b.setAttribute('style', `position:fixed;left:${r.left - 2}px;top:${r.top - 2}px;width:${r.width + 4}px;height:${r.height + 4}px;background:#000`);
    layer.appendChild(b);
  }
  (document.body || document.documentElement).appendChild(layer);
  return layer.childElementCount;
}"#;

/// Removes what [`MASK`] laid over the page.
pub const UNMASK: &str = r#"() => { const m = document.getElementById('__trawl_mask'); if (m) m.remove(); return true; }"#;
