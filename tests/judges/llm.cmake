# The LLM judge (services/judges/llm_judge.h).
calleval_test(llm_judge_test SOURCES llm_judge_test.cc LIBS calleval_judges)
