"""The Lessons page opens on the first lesson, and product text speaks of the product."""
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from explorer import lessons as L

ROOT = Path(__file__).resolve().parent.parent
PROCESS_WORDS = re.compile(r"\bissue \d|\bitem \d|test machine", re.IGNORECASE)


def test_the_page_opens_on_the_depthwise_blog_without_a_link():
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60)
    at.switch_page("views/lessons.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    blog = L.get_lesson("depthwise_blog")
    lesson = at.selectbox(key="lesson")
    assert lesson.value == "depthwise_blog"
    # By title, in the curriculum's order: the depthwise blog first, the search results last.
    assert lesson.options == [lesson.title for lesson in L.lessons()]
    assert lesson.options[0] == blog.title and lesson.options[-1] == L.get_lesson("best").title
    assert at.header[0].value == f"Step 1 of {len(blog.steps)}: {blog.steps[0].preset.title}"
    url = {key: value[-1] if isinstance(value, list) else value for key, value in at.query_params.items()}
    assert url == {"lesson": "depthwise_blog", "step": "1"}  # a link to this very step


def test_product_text_never_names_how_it_was_made():
    files = [*ROOT.glob("presets/*.toml"), *ROOT.glob("docs/*.md"), ROOT / "README.md",
             *ROOT.glob("app/**/*.py"), *ROOT.glob("explorer/**/*.py")]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in files
             for number, line in enumerate(path.read_text().splitlines(), start=1) if PROCESS_WORDS.search(line)]
    assert not found, found
