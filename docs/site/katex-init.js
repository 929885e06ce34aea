// Typeset every formula with KaTeX, served from the site itself (no CDN: the site works offline).
// Markdown pages: pymdownx.arithmatex leaves \( \) and \[ \] in span/div.arithmatex.
// Notebook pages: the markdown cells keep their $ $ and $$ $$.
function typesetMath() {
  if (typeof renderMathInElement !== "function") return;
  const targets = document.querySelectorAll(".arithmatex, .jupyter-wrapper .jp-RenderedMarkdown");
  for (const el of targets) {
    renderMathInElement(el, {
      delimiters: [
        { left: "$$", right: "$$", display: true },
        { left: "\\[", right: "\\]", display: true },
        { left: "$", right: "$", display: false },
        { left: "\\(", right: "\\)", display: false },
      ],
      throwOnError: false,
    });
  }
}
if (typeof document$ !== "undefined") {
  document$.subscribe(typesetMath);  // mkdocs-material: after every page load
} else {
  document.addEventListener("DOMContentLoaded", typesetMath);
}
