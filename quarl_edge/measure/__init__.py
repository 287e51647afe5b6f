"""Stage 6, measure: what the board does with a model, against the host's references.

reference.py holds the golden references (TF Lite Micro's interpreter, tflite-runtime, the
int8-acc head readout), validate.py compares a board's outputs with them bit for bit,
episodes.py plays Gymnasium episodes with the board (or a reference) choosing every action and
computes the return checks and the agreement (for hil, bench and the study's board cells),
hil.py is the HIL run with its result files, bench.py measures cost per inference and memory
per board and scheme, rows.py is the row schema they and the study's board cells share (and the
migration of older rows' keys), selection.py is the int8 checkpoint judge that training is
handed."""
