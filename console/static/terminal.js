// gpucloud console: the instance page's terminal. xterm.js (vendored in
// static/xterm) draws the screen; this file connects it to the console's
// WebSocket, which speaks the API's exec framing: every binary message is
// one channel byte and a payload (0 stdin, 1 stdout, 2 stderr, 3 the exit
// status as JSON, 4 a resize as JSON). The server's text is only ever
// written to the terminal or to textContent, never parsed as HTML.
"use strict";

(function () {
  var STDIN = 0, STDOUT = 1, STDERR = 2, STATUS = 3, RESIZE = 4;
  // The server refuses a larger payload; a paste is sent in pieces.
  var MAX_PAYLOAD = 32 * 1024;
  // A refused session closes with 4000 + the API's HTTP status.
  var REFUSED = 4000;

  // The terminal of the last session, disposed when another starts.
  var current = null;

  function start(button) {
    var screen = document.getElementById("term-screen");
    var status = document.getElementById("term-status");
    function say(text) { status.textContent = text; }

    if (current) current.dispose();
    screen.hidden = false;
    button.hidden = true;
    var term = current = new Terminal({cursorBlink: true, scrollback: 5000, fontSize: 14,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, monospace",
      theme: {background: "#0d1117", foreground: "#e6edf3"}});
    var fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    // Tab belongs to the shell (completion), so the keyboard needs a way
    // out of the terminal: Shift+Tab is left to the browser, which moves
    // the focus back to the page.
    term.attachCustomKeyEventHandler(function (e) {
      return !(e.key === "Tab" && e.shiftKey && !e.ctrlKey && !e.altKey && !e.metaKey);
    });
    term.open(screen);
    fit.fit();

    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    var url = scheme + "//" + location.host + button.dataset.ws +
      "?cols=" + term.cols + "&rows=" + term.rows;
    var ws = new WebSocket(url, "v1.exec.gpucloud.dev");
    ws.binaryType = "arraybuffer";
    var enc = new TextEncoder(), dec = new TextDecoder(), ended = false;
    say("Connecting…");

    function send(ch, bytes) {
      if (ws.readyState !== WebSocket.OPEN) return;
      for (var off = 0; off === 0 || off < bytes.length; off += MAX_PAYLOAD) {
        var part = bytes.subarray(off, off + MAX_PAYLOAD);
        var msg = new Uint8Array(part.length + 1);
        msg[0] = ch;
        msg.set(part, 1);
        ws.send(msg);
      }
    }
    function sendSize(cols, rows) {
      send(RESIZE, enc.encode(JSON.stringify({cols: cols, rows: rows})));
    }

    ws.onopen = function () {
      say("Connected.");
      term.focus();
    };
    ws.onmessage = function (e) {
      if (typeof e.data === "string") return;
      var b = new Uint8Array(e.data);
      if (b.length === 0) return;
      var p = b.subarray(1);
      switch (b[0]) {
      case STDOUT:
      case STDERR:
        term.write(p);
        break;
      case STATUS:
        ended = true;
        var st = {};
        try { st = JSON.parse(dec.decode(p)); } catch (err) { st = {}; }
        var line = "session ended: exit " + st.exit_code;
        if (st.signal) line += " (" + st.signal + ")";
        if (st.message) line += ": " + st.message;
        say(line);
        break;
      }
    };
    ws.onclose = function (e) {
      term.options.disableStdin = true;
      term.options.cursorBlink = false;
      window.removeEventListener("resize", refit);
      button.textContent = "Open a new terminal";
      button.hidden = false;
      if (e.code >= REFUSED && e.code < REFUSED + 1000) {
        say("No terminal: " + (e.reason || "refused (" + (e.code - REFUSED) + ")"));
      } else if (!ended) {
        say("session closed" + (e.reason ? ": " + e.reason : " (the connection ended)"));
      }
    };

    term.onData(function (d) { send(STDIN, enc.encode(d)); });
    // Binary input (some mouse reports) is bytes in a string's char codes.
    term.onBinary(function (d) {
      var b = new Uint8Array(d.length);
      for (var i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
      send(STDIN, b);
    });
    term.onResize(function (sz) { sendSize(sz.cols, sz.rows); });
    var pending = 0;
    function refit() {
      clearTimeout(pending);
      pending = setTimeout(function () { fit.fit(); }, 100);
    }
    window.addEventListener("resize", refit);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("term-open");
    if (button && window.Terminal && window.FitAddon) {
      button.addEventListener("click", function () { start(button); });
    }
  });
})();
