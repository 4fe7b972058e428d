"""The page's look: its CSS and the two small scripts it runs in the browser."""

from __future__ import annotations

from videoqa.heatmap import HATCH, KEPT_OUTLINE, MERGED_MIX, MERGED_TINT, score_scale_css

NARROW = "@media (max-width: 640px)"
_MERGED_SWATCH = tuple(round((1 - MERGED_MIX) * 150 + MERGED_MIX * t) for t in MERGED_TINT)  # on a mid grey
SHOW_QUESTION_BOX = """() => { const el = document.querySelector('#ask-row'); const r = el?.getBoundingClientRect();
  if (r && (r.top < 0 || r.bottom > innerHeight)) el.scrollIntoView({block: 'center'}); }"""
# Click a heatmap to seek the clip's preview to that frame (its time is in the caption: "#3 · 1.25 s · …").
SEEK_ON_CLICK = """() => document.addEventListener('click', (e) => {
  const item = e.target.closest('#heatmaps .thumbnail-item'), video = document.querySelector('#preview video');
  const time = item && /· (\\d+(?:\\.\\d+)?) s/.exec(item.innerText);
  if (time && video) video.currentTime = parseFloat(time[1]);
}, true)"""

CSS = f"""
#stats table {{ font-size: 0.9em; }}
#stats thead {{ display: none; }}  /* a two-column table of named values: no header row */
/* one typing indicator: the answer's own "…" bubble, not Gradio's pending dots as well */
#chat .message.pending, #chat .message-row:has(> .pending) {{ display: none !important; }}
/* the chat's toolbar (copy all, clear) sits above the first bubble, not over it */
#chat .bubble-wrap {{ padding-top: 2.4rem; }}
#stats td:first-child {{ white-space: nowrap; font-weight: 600; }}
/* the text of a message exactly as typed, spaces and line breaks included */
#chat .message-content .md {{ white-space: pre-wrap; }}
/* every frame's heatmap at once (no fixed-height scroll box), each caption in full under its image */
.heatmaps, .heatmaps .grid-wrap {{ height: auto !important; max-height: none !important; }}
/* columns at most 300 px wide: a one-frame answer is not one 880 px picture */
.heatmaps .grid-container {{ grid-template-columns: repeat(var(--grid-cols), minmax(0, 300px));
  padding-top: 2.2rem; }}  /* below the gallery's download button */
.heatmaps .thumbnail-item {{ aspect-ratio: auto; display: flex; flex-direction: column; height: auto; }}
.heatmaps .thumbnail-item img {{ aspect-ratio: 1 / 1; width: 100%; height: auto; }}
.heatmaps .caption-label {{ position: static; max-width: none; white-space: normal; overflow: visible;
  border: none; border-radius: 0; font-size: 0.85em; }}
#legend {{ font-size: 0.85em; line-height: 1.9; }}
#legend .swatch {{ display: inline-block; width: 1.1em; height: 1.1em; vertical-align: -0.2em; margin: 0 0.3em 0 0.8em;
  border-radius: 2px; }}
#legend .kept {{ background: #9a9a9a; outline: 2px solid rgb{KEPT_OUTLINE}; outline-offset: -2px; }}
#legend .dropped {{ background: repeating-linear-gradient(45deg, rgb{HATCH} 0 2px, #555 2px 6px); }}
#legend .merged {{ background: rgb{_MERGED_SWATCH}; }}
#legend .scale {{ display: inline-block; width: 9em; height: 0.9em; vertical-align: -0.1em; margin: 0 0.4em;
  background: {score_scale_css()}; border-radius: 2px; }}
/* the legend goes with the heatmaps: none before the first answer */
#results:not(:has(#heatmaps)) #legend {{ display: none; }}
/* Compare: one-line method names (same height in every column), two-line captions at most */
.compare-head h4 {{ white-space: nowrap; overflow: hidden; text-overflow: ellipsis; margin: 0; }}
.compare-heatmaps .caption-label {{ font-size: 0.75em; padding: 2px 4px; }}
/* examples: compact buttons, thumbnail then question, left-aligned, two lines at most */
#examples {{ gap: 4px; }}
#examples .example {{ justify-content: flex-start; text-align: left; font-weight: normal; padding: 2px 6px;
  min-height: 0; line-height: 1.25; }}
#examples .example img {{ width: 30px; height: 30px; object-fit: cover; border-radius: 3px; margin-right: 6px;
  flex: none; }}
#model-card p {{ font-size: 0.9em; }}
{NARROW} {{
  #model-card p, #legend div {{ font-size: 0.8rem !important; line-height: 1.45 !important; }}
  #preview video {{ max-height: 150px; }}
  .heatmaps .grid-container {{ grid-template-columns: repeat(2, minmax(0, 1fr)) !important; }}
  #chat {{ height: 52vh !important; }}
  /* phone first: the clip box and the examples, then the chat and its results, then the clip's preview and
     the pruning settings (the clip column's parts join the page's single column) */
  #main {{ flex-direction: column; }}
  #clip-col {{ display: contents; }}
  #upload {{ order: 1; }}
  #examples {{ order: 2; }}
  #main-col {{ order: 3; }}
  #preview {{ order: 4; }}
  #settings {{ order: 5; }}
  #examples {{ display: grid !important; grid-template-columns: 1fr 1fr; }}
  #examples-title {{ grid-column: 1 / -1; }}
  #examples .example {{ font-size: 0.8em; }}
  /* Compare: one method per row, its heatmaps three across */
  #compare {{ flex-direction: column; }}
  #compare .compare-method {{ width: 100%; min-width: 100% !important; }}
  .compare-heatmaps .grid-container {{ grid-template-columns: repeat(3, minmax(0, 1fr)) !important; }}
}}
"""
