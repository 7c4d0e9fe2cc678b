"""The Streamlit app: ``streamlit run app/main.py``. Thin pages over the ``explorer`` library."""
