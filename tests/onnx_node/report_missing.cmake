# The onnx_node_suite CTest test when the suite could not be built: fails with MESSAGE, which
# names what is missing (tests/onnx_node/CMakeLists.txt).
message(FATAL_ERROR "${MESSAGE}")
