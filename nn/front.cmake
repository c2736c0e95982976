# ONNX loading, graph passes, .npy files.
list(APPEND SLUICE_NN_SOURCES)
list(APPEND SLUICE_NN_TEST_SOURCES)
