# The deterministic judges (phrase and options checks) and the typing and classification of
# metric results.
calleval_test(text_judges_test SOURCES text_judges_test.cc LIBS calleval_judges)
calleval_test(metric_values_test SOURCES metric_values_test.cc LIBS calleval_judges)
