"""Start: what the tool is, in two lines, and the lessons as the way in (in the curriculum's
order: title, one line, level, the GPU their timing needs), with the Explorer one click away.

A link to a setting (``/?preset=…``, the Explorer's address before this page) goes on to the
Explorer, which opens it."""
import streamlit as st

from app import session
from explorer import lessons as L

if session.take_link():
    st.switch_page("views/explorer.py", query_params=st.query_params.to_dict())

st.title("TVM schedule explorer")
st.markdown("Move the knobs of a GPU schedule written with Apache TVM and see what they change: the TensorIR, the "
            "CUDA, how threads share the work, bank conflicts, occupancy and, on a GPU, the time beside PyTorch's.")
st.markdown("**Start with a lesson**: each follows a tutorial step by step and checks its claims on this machine.")
st.page_link("views/explorer.py", label="Or open the Explorer and move the knobs yourself", icon=":material/code:")

st.header("Lessons")
st.caption("Every lesson's code, diagrams and structural claims need no GPU; its timing claims need the GPU it names.")
for number, lesson in enumerate(L.lessons(), start=1):
    with st.container(border=True):
        st.page_link("views/lessons.py", label=f"{number}. {lesson.title}", icon=":material/school:",
                     query_params={"lesson": lesson.id, "step": "1"})
        if lesson.tagline:
            st.markdown(lesson.tagline)
        steps = f"{len(lesson.steps)} step" + ("s" if len(lesson.steps) > 1 else "")
        st.caption(" · ".join(fact for fact in (lesson.level.capitalize(), steps,
                                                f"timing on {lesson.gpu}" if lesson.gpu else "") if fact))
