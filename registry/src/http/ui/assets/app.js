// The web view's one script (served from /ui/static/app.js under
// `script-src 'self'`): copy buttons. Everything else is plain HTML, so
// pages work without it.
for (const button of document.querySelectorAll("button.copy[data-copy]")) {
  button.addEventListener("click", async () => {
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    try {
      await navigator.clipboard.writeText(source.textContent);
      button.textContent = "Copied";
    } catch {
      // No clipboard (an insecure context): select the text instead.
      const range = document.createRange();
      range.selectNodeContents(source);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "Selected";
    }
    setTimeout(() => (button.textContent = "Copy"), 2000);
  });
}
