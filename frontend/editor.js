// The setup session's configuration editor (templates/routing/setup.html): CodeMirror 6 over the
// document's <textarea>, with line numbers, YAML highlighting and the server's problems as lint
// markers. Built once into static/codemirror/editor.js by `make editor-bundle`.
//
// Progressive enhancement: without this script the plain textarea posts the document and each
// problem's link (href="#line-N") opens the numbered read-only copy at its line. With it, the
// editor replaces the textarea and writes every change back into it, so the form (plain or
// htmx) still posts the textarea; a problem's link puts the editor's cursor on its line.
//
// As the document is typed, the server checks it (data-check-url, debounced) and its problems
// become the lint markers before anything is saved; nothing is stored by the check.
//
// The Content-Security-Policy allows no inline style: CodeMirror's own style element carries
// the page's nonce (<meta name="csp-nonce" nonce="...">, EditorView.cspNonce), and nothing
// here sets a style attribute.

import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { yaml } from "@codemirror/lang-yaml";
import { bracketMatching, defaultHighlightStyle, indentOnInput, syntaxHighlighting } from "@codemirror/language";
import { linter, lintGutter, lintKeymap, setDiagnostics } from "@codemirror/lint";
import { EditorState } from "@codemirror/state";
import {
  drawSelection,
  EditorView,
  highlightActiveLine,
  highlightActiveLineGutter,
  highlightSpecialChars,
  keymap,
  lineNumbers,
} from "@codemirror/view";

const TEXTAREA = "textarea[data-code-editor]";
const views = new WeakMap();

function styleNonce() {
  // The nonce attribute's value is hidden from getAttribute once parsed: read the property.
  return document.querySelector('meta[name="csp-nonce"]')?.nonce ?? "";
}

function problemsOf(textarea) {
  const holder = textarea.dataset.problems ? document.getElementById(textarea.dataset.problems) : null;
  if (!holder) {
    return [];
  }
  try {
    return JSON.parse(holder.textContent);
  } catch {
    return [];
  }
}

// A problem's line (1-based) as a position range in the document: from its column (or the
// line's first non-blank character) to the line's end. No line, or one past the end: the
// start of the document, or its last line.
function rangeOf(doc, problem) {
  if (!problem.line) {
    return { from: 0, to: Math.min(doc.length, doc.line(1).to) };
  }
  const line = doc.line(Math.min(Math.max(problem.line, 1), doc.lines));
  const indent = line.text.length - line.text.trimStart().length;
  const column = problem.column ? Math.min(problem.column - 1, line.length) : indent;
  const from = line.from + column;
  return { from, to: Math.max(from, line.to) };
}

function diagnosticsOf(doc, problems) {
  return problems.map((problem) => ({
    ...rangeOf(doc, problem),
    severity: "error",
    message: problem.line ? `line ${problem.line}: ${problem.message}` : problem.message,
  }));
}

// Put the cursor at the start of `line` (1-based), scroll it to the middle of the editor and
// the editor into the window, and give the editor the keyboard focus.
function goToLine(view, line, { focus = true } = {}) {
  const { from } = rangeOf(view.state.doc, { line });
  view.dispatch({
    selection: { anchor: from },
    effects: EditorView.scrollIntoView(from, { y: "center" }),
  });
  if (focus) {
    view.focus();
  }
}

// The CSRF token htmx sends (the body's hx-headers), for the check's POST.
function csrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] ?? "";
  } catch {
    return "";
  }
}

// Lint as the document is typed: the server's check of the text, its problems as diagnostics.
// A check that fails (network, a signed-out session) leaves the markers as they were.
function serverCheck(url) {
  return linter(
    async (view) => {
      const text = view.state.doc.toString();
      try {
        const response = await fetch(url, {
          method: "POST",
          credentials: "same-origin",
          headers: { "X-CSRFToken": csrfToken(), "Content-Type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ document: text }),
        });
        if (!response.ok && response.status !== 400) {
          return [];
        }
        const answer = await response.json();
        // The document changed meanwhile: the next check will mark it.
        if (view.state.doc.toString() !== text) {
          return [];
        }
        return diagnosticsOf(view.state.doc, answer.problems ?? []);
      } catch {
        return [];
      }
    },
    { delay: 500 },
  );
}

function enhance(textarea) {
  if (views.has(textarea)) {
    return;
  }
  const host = textarea.closest("[data-code-editor-host]") ?? textarea.parentElement;
  const label = textarea.id ? document.querySelector(`label[for="${textarea.id}"]`) : null;
  // How to leave the editor by keyboard (Tab indents in it), shown only with the editor.
  const hint = host.querySelector("[data-code-editor-hint]");
  hint?.removeAttribute("hidden");
  const described = [textarea.getAttribute("aria-describedby"), hint?.id].filter(Boolean).join(" ");
  // tabindex: the scrolling box holds a focusable element in the tab order (axe does not count
  // a bare contenteditable), and it is the same single tab stop.
  const contentAttributes = { tabindex: "0" };
  if (label?.id) {
    contentAttributes["aria-labelledby"] = label.id;
  }
  if (described) {
    contentAttributes["aria-describedby"] = described;
  }
  if (textarea.hasAttribute("aria-invalid")) {
    contentAttributes["aria-invalid"] = textarea.getAttribute("aria-invalid");
  }
  const state = EditorState.create({
    doc: textarea.value,
    extensions: [
      EditorView.cspNonce.of(styleNonce()),
      lineNumbers(),
      highlightActiveLineGutter(),
      highlightSpecialChars(),
      history(),
      drawSelection(),
      indentOnInput(),
      bracketMatching(),
      highlightActiveLine(),
      syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
      yaml(),
      lintGutter(),
      ...(textarea.dataset.checkUrl ? [serverCheck(textarea.dataset.checkUrl)] : []),
      // F8 moves to the next problem, Ctrl-Shift-m lists them.
      keymap.of([...defaultKeymap, ...historyKeymap, ...lintKeymap, indentWithTab]),
      EditorView.contentAttributes.of(contentAttributes),
      EditorView.updateListener.of((update) => {
        if (update.docChanged) {
          textarea.value = update.state.doc.toString();
        }
      }),
    ],
  });
  const view = new EditorView({ state });
  textarea.after(view.dom);
  textarea.hidden = true;
  // A hidden required field that is empty would stop the submit with nowhere to show why: the
  // server says it instead.
  textarea.required = false;
  views.set(textarea, view);
  label?.addEventListener("click", (event) => {
    event.preventDefault();
    view.focus();
  });

  const problems = problemsOf(textarea);
  if (problems.length) {
    view.dispatch(setDiagnostics(view.state, diagnosticsOf(view.state.doc, problems)));
    // Show the first problem's line without taking the focus from where the page put it.
    const first = problems.find((problem) => problem.line);
    if (first) {
      goToLine(view, first.line, { focus: false });
    }
  }
  host.classList.add("code-editor-on");
}

function enhanceWithin(root) {
  const found = root.matches?.(TEXTAREA) ? [root] : [...root.querySelectorAll(TEXTAREA)];
  for (const textarea of found) {
    enhance(textarea);
  }
}

// A problem's link: with the editor, the cursor goes to its line instead of the read-only copy.
document.addEventListener("click", (event) => {
  const link = event.target instanceof Element ? event.target.closest("a[data-problem-line]") : null;
  if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
    return;
  }
  const textarea = document.getElementById(link.dataset.editor || "");
  const view = textarea ? views.get(textarea) : null;
  if (!view) {
    return;
  }
  event.preventDefault();
  goToLine(view, Number(link.dataset.problemLine));
});

// The first page, then every fragment htmx swaps in (a refused save shows the form again).
document.addEventListener("htmx:load", (event) => enhanceWithin(event.detail.elt));
if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", () => enhanceWithin(document));
} else {
  enhanceWithin(document);
}
