# The code judge's context (services/judges/code_context.h).
calleval_test(code_context_test SOURCES code_context_test.cc LIBS calleval_judges)
