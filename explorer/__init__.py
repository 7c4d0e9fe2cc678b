"""TVM schedule explorer: workloads, knob-driven TensorIR schedule templates, verified
CUDA builds, analyses and measurements. Never imports streamlit (the UI lives in app/)."""
