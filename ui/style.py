"""The page's look: its CSS and the two small scripts it runs in the browser."""

from __future__ import annotations

from videoqa.heatmap import HATCH, KEPT_OUTLINE, MERGED_MIX, MERGED_TINT, score_scale_css

NARROW = "@media (max-width: 640px)"
_MERGED_SWATCH = tuple(round((1 - MERGED_MIX) * 150 + MERGED_MIX * t) for t in MERGED_TINT)  # on a mid grey
SHOW_QUESTION_BOX = """() => { const el = document.querySelector('#ask-row'); const r = el?.getBoundingClientRect();
  if (r && (r.top < 0 || r.bottom > innerHeight)) el.scrollIntoView({block: 'center'}); }"""
# After an example or a suggested question is picked: the next thing to do is to ask (Enter would otherwise
# stay on the button, six Shift+Tabs from the box).
FOCUS_QUESTION_BOX = "() => document.querySelector('#question textarea')?.focus({preventScroll: true})"
# Click a heatmap to seek the clip's preview to that frame (its time is in the caption: "#3 · 1.25 s · …").
SEEK_ON_CLICK = """() => document.addEventListener('click', (e) => {
  const item = e.target.closest('#chat figure.frame'), video = document.querySelector('#preview video');
  const time = item && /· (\\d+(?:\\.\\d+)?) s/.exec(item.innerText);
  if (time && video) video.currentTime = parseFloat(time[1]);
}, true)"""

CSS = f"""
/* WCAG AA (4.5:1) for all text: darker hints, labels, primary buttons and footer than the Soft theme's */
:root, .gradio-container {{
  --body-text-color-subdued: #4b5563; --block-info-text-color: #4b5563; --block-label-text-color: #3730a3;
  --block-title-text-color: #3730a3; --input-placeholder-color: #6b7280;
  --button-primary-background-fill: #4338ca; --button-primary-background-fill-hover: #3730a3;
  --button-primary-text-color: #ffffff; --button-primary-text-color-hover: #ffffff;
  --button-secondary-text-color: #1f2937; --link-text-color: #3730a3; --link-text-color-hover: #312e81;
  --link-text-color-visited: #4c1d95; --color-accent: #4338ca;
}}
footer, footer a, footer button, .show-api {{ color: #374151 !important; opacity: 1 !important; }}
.skip-link {{ position: absolute; left: -9999px; }}
.skip-link:focus {{ position: static; display: inline-block; padding: 4px 8px; background: #fff; color: #3730a3; }}
#intro p {{ font-size: 0.95em; margin: 0; }}
#model-card p, #model-card li {{ font-size: 0.9em; }}
#model-card details summary {{ cursor: pointer; color: #3730a3; font-size: 0.9em; }}
#clip-name p {{ margin: 0; font-size: 0.9em; overflow-wrap: anywhere; }}
/* suggested questions: small pill buttons under the box */
#chips {{ gap: 6px; flex-wrap: wrap; }}
#chips .chip {{ flex: 0 1 auto; font-weight: normal; border-radius: 999px; padding: 2px 10px; min-height: 0;
  width: auto; }}
/* the text of a message exactly as typed, spaces and line breaks included */
#chat .message-content .md {{ white-space: pre-wrap; }}
/* an answer's results block: normal flow (its HTML has no line breaks to keep) */
#chat .turn-results, #chat .turn-results * {{ white-space: normal; }}
#chat .turn-summary {{ margin: 0 0 0.4em; }}
#chat .frames {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 6px;
  max-width: 100%; }}
#chat figure.frame {{ margin: 0; cursor: pointer; }}
#chat figure.frame img {{ width: 100%; max-width: 300px; height: auto; aspect-ratio: 1 / 1; display: block; }}
#chat figure.frame figcaption {{ font-size: 0.85rem; line-height: 1.3; }}
#chat .turn-stats table {{ font-size: 0.9em; }}
#chat .turn-stats th {{ white-space: nowrap; text-align: left; padding-right: 0.6em; vertical-align: top; }}
#chat .turn-stats summary {{ cursor: pointer; }}
/* one typing indicator: the answer's own "…" bubble, not Gradio's pending dots as well */
#chat .message.pending, #chat .message-row:has(> .pending) {{ display: none !important; }}
/* the chat's toolbar (copy all, clear) sits above the first bubble, not over it */
#chat .bubble-wrap {{ padding-top: 2.4rem; }}
/* every frame's heatmap at once (no fixed-height scroll box), each caption in full under its image */
.heatmaps, .heatmaps .grid-wrap {{ height: auto !important; max-height: none !important; }}
.heatmaps .grid-container {{ grid-template-columns: repeat(var(--grid-cols), minmax(0, 300px));
  padding-top: 2.2rem; }}  /* below the gallery's download button */
.heatmaps .thumbnail-item {{ aspect-ratio: auto; display: flex; flex-direction: column; height: auto; }}
.heatmaps .thumbnail-item img {{ aspect-ratio: 1 / 1; width: 100%; height: auto; }}
.heatmaps .caption-label {{ position: static; max-width: none; white-space: normal; overflow: visible;
  border: none; border-radius: 0; font-size: 0.85rem; color: #1f2937; background: transparent; }}
.legend {{ font-size: 0.85rem; line-height: 1.9; }}
.legend .swatch {{ display: inline-block; width: 1.1em; height: 1.1em; vertical-align: -0.2em; margin: 0 0.3em 0 0.8em;
  border-radius: 2px; }}
.legend .kept {{ background: #9a9a9a; outline: 2px solid rgb{KEPT_OUTLINE}; outline-offset: -2px; }}
.legend .dropped {{ background: repeating-linear-gradient(45deg, rgb{HATCH} 0 2px, #555 2px 6px); }}
.legend .merged {{ background: rgb{_MERGED_SWATCH}; }}
.legend .scale {{ display: inline-block; width: 9em; height: 0.9em; vertical-align: -0.1em; margin: 0 0.4em;
  background: {score_scale_css()}; border-radius: 2px; }}
#method-help ul {{ margin: 0.3em 0; padding-left: 1.2em; font-size: 0.85rem; }}
#method-help summary {{ cursor: pointer; font-size: 0.9rem; }}
/* Compare: three methods a row, each the same width; one-line names; images about 130 px */
#compare {{ flex-wrap: wrap; gap: 12px; }}
#compare .compare-method {{ flex: 1 1 30%; max-width: calc(33.3% - 8px); min-width: 200px !important; }}
.compare-head h4 {{ white-space: nowrap; overflow: hidden; text-overflow: ellipsis; margin: 0; }}
.compare-head .method-help {{ font-size: 0.8rem; margin: 0.2em 0 0; line-height: 1.3; min-height: 2.6em; }}
.compare-heatmaps .caption-label {{ font-size: 0.8rem !important; padding: 2px 4px; }}
/* examples: compact buttons, thumbnail then question, left-aligned, two lines at most */
#examples {{ gap: 4px; }}
#examples .example {{ justify-content: flex-start; text-align: left; font-weight: normal; padding: 2px 6px;
  font-size: 0.85rem !important;
  min-height: 0; line-height: 1.25; }}
#examples .example img {{ width: 30px; height: 30px; object-fit: cover; border-radius: 3px; margin-right: 6px;
  flex: none; }}
{NARROW} {{
  #model-card p, #model-card li, #intro p, .legend {{ font-size: 0.8rem !important; line-height: 1.45 !important; }}
  #preview video {{ max-height: 150px; }}
  #chat {{ height: 60vh !important; }}
  #chat .frames {{ grid-template-columns: repeat(2, minmax(0, 1fr)); }}
  #chat figure.frame figcaption {{ font-size: 0.8rem !important; }}
  /* phone first: the clip box and the examples, then the chat and its results, then the clip's preview and
     the pruning settings (the clip column's parts join the page's single column) */
  #main {{ flex-direction: column; }}
  #clip-col {{ display: contents; }}
  #upload {{ order: 1; }}
  #examples {{ order: 2; }}
  #main-col {{ order: 3; }}
  #clip-name {{ order: 4; }}
  #preview {{ order: 5; }}
  #settings {{ order: 6; }}
  #examples {{ display: grid !important; grid-template-columns: 1fr 1fr; }}
  #examples-title {{ grid-column: 1 / -1; }}
  #examples .example {{ font-size: 0.8125rem !important; }}
  /* Compare: one method per row, its heatmaps in one row that scrolls sideways (the page stays short) */
  #compare {{ flex-direction: column; gap: 6px; }}
  #compare .compare-method {{ width: 100%; max-width: 100%; min-width: 0 !important; overflow: hidden; }}
  .compare-heatmaps, .compare-heatmaps .grid-wrap {{ max-width: calc(100vw - 48px); }}
  .compare-head .method-help {{ min-height: 0; }}
  .compare-heatmaps .grid-wrap {{ overflow-x: auto !important; min-height: 0 !important; padding: 0 !important; }}
  .compare-heatmaps .grid-container {{ padding-top: 0 !important; }}
  .compare-heatmaps .icon-button-wrapper, .compare-heatmaps .icon-buttons {{ display: none !important; }}
  .compare-heatmaps {{ padding: 4px !important; min-height: 0 !important; }}
  #compare .compare-answer textarea {{ min-height: 0 !important; height: 2.2em !important; }}
  #compare .compare-answer {{ padding: 4px !important; }}
  .compare-summary p {{ font-size: 0.85rem; line-height: 1.35; margin: 0; }}
  .compare-heatmaps .grid-container {{ grid-template-columns: none !important; grid-auto-flow: column;
    grid-auto-columns: 104px; }}
  .compare-heatmaps .caption-label {{ font-size: 0.8rem !important; }}
}}
"""
